//! Text tables whose columns line up: each column as wide as its widest cell in terminal
//! columns (a CJK character takes two, a combining mark none), measured on the cell as it will
//! be shown (redacted, control characters escaped), so no cell can push the ones after it.

use unicode_width::UnicodeWidthStr;

/// How a column's cells sit in its width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    /// Numbers, so their digits line up.
    Right,
}

/// A cell as it will reach the terminal: redacted, control characters escaped, on one line.
pub fn cell(text: &str) -> String {
    crate::core::text::one_line(&crate::output::redact(text)).into_owned()
}

/// The display width of `text` in terminal columns.
pub fn width(text: &str) -> usize {
    UnicodeWidthStr::width(text)
}

/// `rows` as lines with their columns aligned (cells made safe with [`cell`] first), two
/// spaces apart; `align` gives each column's alignment (missing ones are left-aligned). The last
/// column is not padded, so no line ends in spaces.
pub fn aligned(rows: &[Vec<String>], align: &[Align]) -> Vec<String> {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|c| cell(c)).collect())
        .collect();
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|row| row.get(i))
                .map(|c| width(c))
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .map(|row| {
            let last = row.len().saturating_sub(1);
            let cells: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let pad = " ".repeat(widths[i].saturating_sub(width(c)));
                    match (align.get(i).copied().unwrap_or(Align::Left), i == last) {
                        (Align::Right, _) => format!("{pad}{c}"),
                        (Align::Left, true) => c.clone(),
                        (Align::Left, false) => format!("{c}{pad}"),
                    }
                })
                .collect();
            cells.join("  ")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(cells: &[&str]) -> Vec<String> {
        cells.iter().map(|c| (*c).to_owned()).collect()
    }

    #[test]
    fn columns_line_up_whatever_their_characters() {
        let lines = aligned(
            &[
                row(&["ID", "N", "MODEL"]),
                row(&["t_1", "7", "m"]),
                row(&["模型名", "12", "x"]),
                row(&["a\u{1b}[2Jb", "3", "e\u{301}"]),
            ],
            &[Align::Left, Align::Right],
        );
        assert_eq!(
            lines,
            [
                "ID            N  MODEL",
                "t_1           7  m",
                "模型名       12  x",
                "a\\u{1b}[2Jb   3  e\u{301}",
            ]
        );
        let columns: Vec<usize> = lines
            .iter()
            .map(|l| width(&l[..l.rfind("  ").unwrap()]))
            .collect();
        assert!(columns.windows(2).all(|w| w[0] == w[1]), "{lines:#?}");
    }

    #[test]
    fn no_rows_no_lines() {
        assert!(aligned(&[], &[]).is_empty());
    }
}
