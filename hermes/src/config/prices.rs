//! `kanban.prices`: what each model costs, in USD per million tokens, so that `kanban usage`
//! can estimate what the ledger's calls cost. Only an estimate: the provider's invoice is the
//! truth (discounts, cached prompts and rounding are not known here).

use std::collections::BTreeMap;

use serde_norway::Value;

use super::{ConfigError, Got, Reader, Section};

/// The dotted key, in one place for every message that names it.
pub const PRICES_KEY: &str = "kanban.prices";

/// The highest price a model may be given, in USD per million tokens (a dollar a token): far
/// above any real model's, and low enough that every estimate stays a finite number however many
/// tokens the ledger holds (token counts saturate at `i64::MAX`).
pub const MAX_PRICE: f64 = 1_000_000.0;

/// One model's price, USD per million tokens. Both are finite, between 0 and [`MAX_PRICE`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    /// Per million prompt (input) tokens.
    pub input: f64,
    /// Per million completion (output) tokens.
    pub output: f64,
}

// NaN is refused when a price is read, so equality is total.
impl Eq for Price {}

impl Price {
    /// The estimated cost, in USD, of a call with these token counts (an unknown count as 0).
    pub fn cost(&self, prompt_tokens: u64, completion_tokens: u64) -> f64 {
        (prompt_tokens as f64 * self.input + completion_tokens as f64 * self.output) / 1_000_000.0
    }
}

/// Prices by model name, exactly as the ledger records it (the model a request named).
pub type Prices = BTreeMap<String, Price>;

/// An estimated cost as shown: dollars with four decimals, and `<$0.0001` for a cost that is
/// not zero but would show as one.
pub fn format_cost(usd: f64) -> String {
    if usd > 0.0 && usd < 0.000_05 {
        return "<$0.0001".to_owned();
    }
    format!("${usd:.4}")
}

pub(super) fn read(reader: &Reader, kanban: &Section) -> Result<Prices, ConfigError> {
    let Some(value) = kanban.get("prices") else {
        return Ok(Prices::new());
    };
    let Value::Mapping(models) = value else {
        return Err(reader.invalid(
            PRICES_KEY,
            format!(
                "expected a mapping of model name to {{input: USD, output: USD}} per million \
                 tokens, got {}",
                Got(value)
            ),
        ));
    };
    let mut prices = Prices::new();
    for (name, entry) in models {
        let Value::String(name) = name else {
            return Err(reader.invalid(
                PRICES_KEY,
                format!("a model name must be a string, got {}", Got(name)),
            ));
        };
        let key = format!("{PRICES_KEY}.{name}");
        let Value::Mapping(fields) = entry else {
            return Err(reader.invalid(
                key,
                format!(
                    "expected {{input: USD, output: USD}} per million tokens, got {}",
                    Got(entry)
                ),
            ));
        };
        for field in fields.keys() {
            if !matches!(field, Value::String(f) if f == "input" || f == "output") {
                return Err(reader.invalid(
                    key,
                    format!(
                        "unknown field {}; a price has only input and output",
                        Got(field)
                    ),
                ));
            }
        }
        let usd = |field: &str| -> Result<f64, ConfigError> {
            let dotted = format!("{key}.{field}");
            let Some(v) = fields.get(field) else {
                return Err(reader.invalid(
                    dotted,
                    "missing: give the price in USD per million tokens (0 if free)",
                ));
            };
            match v.as_f64() {
                Some(n) if (0.0..=MAX_PRICE).contains(&n) => Ok(if n == 0.0 { 0.0 } else { n }),
                _ => Err(reader.invalid(
                    dotted,
                    format!(
                        "expected a non-negative number (USD per million tokens) of at most \
                         {MAX_PRICE}, got {}",
                        Got(v)
                    ),
                )),
            }
        };
        let price = Price {
            input: usd("input")?,
            output: usd("output")?,
        };
        prices.insert(name.trim().to_owned(), price);
    }
    Ok(prices)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_is_per_million_tokens() {
        let price = Price {
            input: 0.15,
            output: 0.60,
        };
        // 812 * 0.15 / 1e6 + 143 * 0.60 / 1e6 = 0.0001218 + 0.0000858
        assert!((price.cost(812, 143) - 0.000_207_6).abs() < 1e-12);
        assert_eq!(price.cost(0, 0), 0.0);
        assert_eq!(
            Price {
                input: 3.0,
                output: 15.0
            }
            .cost(1_000_000, 1_000_000),
            18.0
        );
        // Saturated token counts stay finite, at the highest price too, and so do sums of them.
        assert!(price.cost(u64::MAX, u64::MAX).is_finite());
        let dearest = Price {
            input: MAX_PRICE,
            output: MAX_PRICE,
        };
        let one = dearest.cost(i64::MAX as u64, i64::MAX as u64);
        assert!(one.is_finite() && (one * 1e12).is_finite());
    }

    #[test]
    fn costs_show_four_decimals() {
        assert_eq!(format_cost(0.0), "$0.0000");
        assert_eq!(format_cost(0.012_34), "$0.0123");
        assert_eq!(format_cost(0.012_36), "$0.0124");
        assert_eq!(format_cost(0.000_207_6), "$0.0002");
        assert_eq!(format_cost(0.000_01), "<$0.0001");
        assert_eq!(format_cost(18.0), "$18.0000");
    }
}
