//! The one table of `config.yaml`'s keys: for each key its dotted name, what it holds, its
//! default and range, whether upstream hermes-agent reads it too, and a line for the docs.
//!
//! Everything else is derived from it, so a key cannot be documented with one range and read
//! with another: the config structs, their defaults and their reader ([`section!`]), the range
//! checks ([`super::NUMERIC_KEYS`]), the names the unknown-key hints pick from (`keys`), and the
//! table in `docs/gateway.md` ([`keys_table`], rewritten by `cargo docs`).

use std::time::Duration;

use serde_json::Value as Json;

use super::{Beyond, ConfigError, NumericKey, Prices, Reader, Section, Unit};

/// One key of `config.yaml`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeySpec {
    /// Dotted, e.g. `kanban.decompose_max_attempts`.
    pub key: &'static str,
    /// What it holds, with its default and range.
    pub kind: Kind,
    /// Whether upstream hermes-agent (0.19.0) reads it.
    pub upstream: Upstream,
    /// What it does, in one line of the docs' table.
    pub meaning: &'static str,
}

/// What a key holds. A default of `None` means the key is unset unless written.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// `true` or `false`, in YAML 1.1's spellings too (`yes`, `off`, …).
    Flag { default: bool },
    /// A string; blank counts as unset.
    Text { default: Option<&'static str> },
    /// A string that may be a secret: a message about it never shows the value.
    Secret,
    /// A whole number of `unit`s.
    Whole {
        unit: &'static str,
        default: Option<u32>,
        range: Range,
    },
    /// Seconds, as an integer or a float.
    Seconds { default: Option<f64>, range: Range },
    /// Read by code of its own (a mapping, a list, a level); what it holds, in words.
    Other { holds: &'static str },
    /// Upstream's, for something this gateway does not do: accepted and ignored.
    Ignored,
}

/// A number's range, and what a value beyond each end does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Range {
    pub min: f64,
    pub max: f64,
    pub below_min: Beyond,
    pub above_max: Beyond,
}

/// Whether upstream hermes-agent has a key. Where both read one, it goes by the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upstream {
    /// Both read it.
    Same,
    /// Only this gateway reads it (upstream has no such bound).
    No,
    /// Only upstream reads it (see [`Kind::Ignored`]).
    Only,
}

const fn row(key: &'static str, kind: Kind) -> KeySpec {
    KeySpec {
        key,
        kind,
        upstream: Upstream::Same,
        meaning: "",
    }
}

pub(super) const fn flag(key: &'static str, default: bool) -> KeySpec {
    row(key, Kind::Flag { default })
}

pub(super) const fn text(key: &'static str, default: Option<&'static str>) -> KeySpec {
    row(key, Kind::Text { default })
}

pub(super) const fn secret(key: &'static str) -> KeySpec {
    row(key, Kind::Secret)
}

/// A whole number from `min` to `max`; both ends are refused beyond unless clamped.
pub(super) const fn whole(
    key: &'static str,
    unit: &'static str,
    default: Option<u32>,
    min: u32,
    max: u32,
) -> KeySpec {
    row(
        key,
        Kind::Whole {
            unit,
            default,
            range: Range::refused(min as f64, max as f64),
        },
    )
}

/// Seconds from `min` to `max`; anything beyond is refused, so no time arithmetic overflows.
pub(super) const fn seconds(
    key: &'static str,
    default: Option<f64>,
    min: f64,
    max: f64,
) -> KeySpec {
    row(
        key,
        Kind::Seconds {
            default,
            range: Range::refused(min, max),
        },
    )
}

pub(super) const fn other(key: &'static str, holds: &'static str) -> KeySpec {
    row(key, Kind::Other { holds })
}

pub(super) const fn ignored(key: &'static str) -> KeySpec {
    KeySpec {
        upstream: Upstream::Only,
        ..row(key, Kind::Ignored)
    }
}

impl Range {
    const fn refused(min: f64, max: f64) -> Range {
        Range {
            min,
            max,
            below_min: Beyond::Refused,
            above_max: Beyond::Refused,
        }
    }
}

impl KeySpec {
    pub(super) const fn meaning(self, meaning: &'static str) -> KeySpec {
        KeySpec { meaning, ..self }
    }

    /// Only this gateway reads the key.
    pub(super) const fn ours(self) -> KeySpec {
        KeySpec {
            upstream: Upstream::No,
            ..self
        }
    }

    /// A value below the minimum is taken as the minimum.
    pub(super) const fn clamped_below(mut self) -> KeySpec {
        match &mut self.kind {
            Kind::Whole { range, .. } | Kind::Seconds { range, .. } => {
                range.below_min = Beyond::Clamped
            }
            _ => panic!("only a number has a range to clamp to"),
        }
        self
    }

    /// A value above the maximum is taken as the maximum.
    pub(super) const fn clamped_above(mut self) -> KeySpec {
        match &mut self.kind {
            Kind::Whole { range, .. } | Kind::Seconds { range, .. } => {
                range.above_max = Beyond::Clamped
            }
            _ => panic!("only a number has a range to clamp to"),
        }
        self
    }

    /// The last segment of the dotted key, as written under its section.
    pub const fn leaf(&self) -> &'static str {
        let bytes = self.key.as_bytes();
        let mut at = bytes.len();
        while at > 0 && bytes[at - 1] != b'.' {
            at -= 1;
        }
        self.key.split_at(at).1
    }

    /// The key's range and unit, when it is a number.
    pub const fn numeric(&self) -> Option<NumericKey> {
        let (unit, range) = match self.kind {
            Kind::Whole { unit, range, .. } => (Unit::Whole(unit), range),
            Kind::Seconds { range, .. } => (Unit::Seconds, range),
            _ => return None,
        };
        Some(NumericKey {
            key: self.key,
            unit,
            min: range.min,
            max: range.max,
            below_min: range.below_min,
            above_max: range.above_max,
        })
    }

    /// Which field types can hold this key.
    const fn shape(&self) -> Shape {
        match self.kind {
            Kind::Flag { .. } => Shape::Flag,
            Kind::Text { default: Some(_) } => Shape::Text,
            Kind::Text { default: None } => Shape::OptText,
            Kind::Whole {
                default: Some(_), ..
            } => Shape::Whole,
            Kind::Whole { default: None, .. } => Shape::OptWhole,
            Kind::Seconds {
                default: Some(_), ..
            } => Shape::Seconds,
            Kind::Seconds { default: None, .. } => Shape::OptSeconds,
            Kind::Secret | Kind::Other { .. } | Kind::Ignored => Shape::Other,
        }
    }
}

/// What a field's type can hold: a key with a default fills a plain type, one without an
/// `Option`, and a key read by its own code a type of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    Flag,
    Text,
    OptText,
    Whole,
    OptWhole,
    Seconds,
    OptSeconds,
    Other,
}

/// A field's type, read from its row of the table.
pub(super) trait Setting: Sized {
    /// The rows it can hold; [`section!`] refuses to compile a field whose row does not fit.
    const SHAPE: Shape;
    /// The value written in section `s`, `None` when the key is absent (or null).
    fn read(reader: &Reader, s: &Section, row: &KeySpec) -> Result<Option<Self>, ConfigError>;
    /// The value when the key is absent.
    fn default_of(row: &KeySpec) -> Self;
    /// The value as a check of the configuration shows it (seconds as a number, unset as
    /// null); `None` for a type read by code of its own, which has no one value to show.
    fn in_force(&self) -> Option<Json> {
        None
    }
}

/// Whether a field of type `T` can hold `row` (checked at compile time, for each field).
pub(super) const fn fits<T: Setting>(row: &KeySpec) -> bool {
    row.shape() as u8 == T::SHAPE as u8
}

/// The field of type `T` that `row` fills: the value in `s`, else the row's default.
pub(super) fn read_setting<T: Setting>(
    reader: &Reader,
    s: &Section,
    row: &KeySpec,
) -> Result<T, ConfigError> {
    Ok(T::read(reader, s, row)?.unwrap_or_else(|| T::default_of(row)))
}

/// Reached only if a row and its field disagree, which [`fits`] stops at compile time.
fn misfit(row: &KeySpec) -> ! {
    unreachable!("{}: the field's type does not fit the row", row.key)
}

fn number(row: &KeySpec) -> NumericKey {
    row.numeric().unwrap_or_else(|| misfit(row))
}

impl Setting for bool {
    const SHAPE: Shape = Shape::Flag;
    fn read(reader: &Reader, s: &Section, row: &KeySpec) -> Result<Option<bool>, ConfigError> {
        reader.boolean(s, row.leaf())
    }
    fn default_of(row: &KeySpec) -> bool {
        match row.kind {
            Kind::Flag { default } => default,
            _ => misfit(row),
        }
    }
    fn in_force(&self) -> Option<Json> {
        Some(Json::Bool(*self))
    }
}

impl Setting for String {
    const SHAPE: Shape = Shape::Text;
    fn read(reader: &Reader, s: &Section, row: &KeySpec) -> Result<Option<String>, ConfigError> {
        reader.opt_string(s, row.leaf())
    }
    fn default_of(row: &KeySpec) -> String {
        match row.kind {
            Kind::Text {
                default: Some(default),
            } => default.to_owned(),
            _ => misfit(row),
        }
    }
    fn in_force(&self) -> Option<Json> {
        Some(Json::String(self.clone()))
    }
}

impl Setting for Option<String> {
    const SHAPE: Shape = Shape::OptText;
    fn read(reader: &Reader, s: &Section, row: &KeySpec) -> Result<Option<Self>, ConfigError> {
        Ok(Some(reader.opt_string(s, row.leaf())?))
    }
    fn default_of(_: &KeySpec) -> Self {
        None
    }
    fn in_force(&self) -> Option<Json> {
        Some(self.clone().map_or(Json::Null, Json::String))
    }
}

impl Setting for u32 {
    const SHAPE: Shape = Shape::Whole;
    fn read(reader: &Reader, s: &Section, row: &KeySpec) -> Result<Option<u32>, ConfigError> {
        reader.whole(s, &number(row))
    }
    fn default_of(row: &KeySpec) -> u32 {
        match row.kind {
            Kind::Whole {
                default: Some(default),
                ..
            } => default,
            _ => misfit(row),
        }
    }
    fn in_force(&self) -> Option<Json> {
        Some(Json::from(*self))
    }
}

impl Setting for Option<u32> {
    const SHAPE: Shape = Shape::OptWhole;
    fn read(reader: &Reader, s: &Section, row: &KeySpec) -> Result<Option<Self>, ConfigError> {
        Ok(Some(reader.whole(s, &number(row))?))
    }
    fn default_of(_: &KeySpec) -> Self {
        None
    }
    fn in_force(&self) -> Option<Json> {
        Some(self.map_or(Json::Null, Json::from))
    }
}

impl Setting for Duration {
    const SHAPE: Shape = Shape::Seconds;
    fn read(reader: &Reader, s: &Section, row: &KeySpec) -> Result<Option<Duration>, ConfigError> {
        reader.seconds(s, &number(row))
    }
    fn default_of(row: &KeySpec) -> Duration {
        match row.kind {
            Kind::Seconds {
                default: Some(default),
                ..
            } => Duration::from_secs_f64(default),
            _ => misfit(row),
        }
    }
    fn in_force(&self) -> Option<Json> {
        Some(Json::from(self.as_secs_f64()))
    }
}

impl Setting for Option<Duration> {
    const SHAPE: Shape = Shape::OptSeconds;
    fn read(reader: &Reader, s: &Section, row: &KeySpec) -> Result<Option<Self>, ConfigError> {
        Ok(Some(reader.seconds(s, &number(row))?))
    }
    fn default_of(_: &KeySpec) -> Self {
        None
    }
    fn in_force(&self) -> Option<Json> {
        Some(self.map_or(Json::Null, |d| Json::from(d.as_secs_f64())))
    }
}

impl Setting for Prices {
    const SHAPE: Shape = Shape::Other;
    fn read(reader: &Reader, s: &Section, _: &KeySpec) -> Result<Option<Prices>, ConfigError> {
        super::prices::read(reader, s).map(Some)
    }
    fn default_of(_: &KeySpec) -> Prices {
        Prices::new()
    }
}

/// Declares a section's config struct from its rows of the table: each field with the row it
/// is read from, then (after `also`) the section's keys that fill no field. Generates the
/// struct, its `Default` (every row's default), its reader (fields read in the order written,
/// which is the order errors are found in), and `KEYS`, the section's rows in that order.
macro_rules! section {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[$field_meta:meta])*
                pub $field:ident: $ty:ty = $row:expr,
            )*
        }
        $(also: [$($also:expr),* $(,)?])?
    ) => {
        $(#[$meta])*
        pub struct $name {
            $( $(#[$field_meta])* pub $field: $ty, )*
        }

        $(
            const _: () = assert!(
                fits::<$ty>(&$row),
                concat!(
                    stringify!($name), ".", stringify!($field),
                    ": its type cannot hold what its row says (a default needs a plain type, \
                     no default an Option)"
                ),
            );
        )*

        impl $name {
            /// This section's rows of the table, in the order they are read.
            pub const KEYS: &'static [KeySpec] = &[$($row,)* $($($also,)*)?];

            /// Each of this section's keys that holds one value, with its value in force.
            pub fn in_force(&self) -> Vec<(KeySpec, serde_json::Value)> {
                let mut values = Vec::new();
                $(
                    if let Some(value) = Setting::in_force(&self.$field) {
                        values.push((const { $row }, value));
                    }
                )*
                values
            }

            fn read(reader: &Reader, s: &Section) -> Result<$name, ConfigError> {
                Ok($name {
                    $( $field: read_setting::<$ty>(reader, s, const { &$row })?, )*
                })
            }
        }

        impl Default for $name {
            fn default() -> Self {
                $name {
                    $( $field: <$ty as Setting>::default_of(const { &$row }), )*
                }
            }
        }
    };
}
pub(super) use section;

pub(super) const fn rows_in(sections: &[&[KeySpec]]) -> usize {
    let mut count = 0;
    let mut i = 0;
    while i < sections.len() {
        count += sections[i].len();
        i += 1;
    }
    count
}

pub(super) const fn all_rows<const N: usize>(sections: &[&[KeySpec]]) -> [KeySpec; N] {
    let mut rows = [ignored(""); N];
    let mut n = 0;
    let mut i = 0;
    while i < sections.len() {
        let mut j = 0;
        while j < sections[i].len() {
            rows[n] = sections[i][j];
            n += 1;
            j += 1;
        }
        i += 1;
    }
    rows
}

pub(super) const fn numeric_count(rows: &[KeySpec]) -> usize {
    let mut count = 0;
    let mut i = 0;
    while i < rows.len() {
        if rows[i].numeric().is_some() {
            count += 1;
        }
        i += 1;
    }
    count
}

pub(super) const fn numeric_keys<const N: usize>(rows: &[KeySpec]) -> [NumericKey; N] {
    let mut keys = [NumericKey {
        key: "",
        unit: Unit::Seconds,
        min: 0.0,
        max: 0.0,
        below_min: Beyond::Refused,
        above_max: Beyond::Refused,
    }; N];
    let mut n = 0;
    let mut i = 0;
    while i < rows.len() {
        if let Some(key) = rows[i].numeric() {
            keys[n] = key;
            n += 1;
        }
        i += 1;
    }
    keys
}

/// Which implementation's keys a list of names holds.
#[derive(Debug, Clone, Copy)]
pub(super) enum ReadBy {
    Hermes,
    Upstream,
    Either,
}

impl ReadBy {
    const fn reads(self, row: &KeySpec) -> bool {
        !matches!(
            (self, row.upstream),
            (ReadBy::Hermes, Upstream::Only) | (ReadBy::Upstream, Upstream::No)
        )
    }
}

/// How many of `rows` are read `by`.
pub(super) const fn leaf_count(rows: &[KeySpec], by: ReadBy) -> usize {
    let mut count = 0;
    let mut i = 0;
    while i < rows.len() {
        if by.reads(&rows[i]) {
            count += 1;
        }
        i += 1;
    }
    count
}

/// The leaves of the rows read `by`, in table order.
pub(super) const fn leaves<const N: usize>(rows: &[KeySpec], by: ReadBy) -> [&'static str; N] {
    let mut leaves = [""; N];
    let mut n = 0;
    let mut i = 0;
    while i < rows.len() {
        if by.reads(&rows[i]) {
            leaves[n] = rows[i].leaf();
            n += 1;
        }
        i += 1;
    }
    leaves
}

/// The table of `docs/gateway.md` for `rows` (see [`super::keys_table`]): each key read, then
/// the upstream keys accepted and ignored.
pub(super) fn markdown(rows: &[KeySpec]) -> String {
    let mut out = String::from(
        "| key | holds | default | range | upstream hermes-agent | meaning |\n\
         |---|---|---|---|---|---|\n",
    );
    let mut ignored = Vec::new();
    for row in rows {
        if row.kind == Kind::Ignored {
            ignored.push(format!("`{}`", row.key));
            continue;
        }
        let (holds, default, range) = describe(&row.kind);
        let upstream = match row.upstream {
            Upstream::Same => "reads it too",
            Upstream::No | Upstream::Only => "—",
        };
        out.push_str(&format!(
            "| `{}` | {holds} | {default} | {range} | {upstream} | {} |\n",
            row.key, row.meaning
        ));
    }
    if !ignored.is_empty() {
        out.push_str(&format!(
            "\nAccepted and ignored, as keys only upstream hermes-agent reads: {}.\n",
            ignored.join(", ")
        ));
    }
    out
}

/// What a key holds, its default and its range, as the docs' table shows them.
fn describe(kind: &Kind) -> (String, String, String) {
    let none = || "—".to_owned();
    match *kind {
        Kind::Flag { default } => (
            "true or false".to_owned(),
            default.to_string(),
            String::new(),
        ),
        Kind::Text { default } => (
            "a string".to_owned(),
            default.map_or_else(none, |d| format!("`{d}`")),
            String::new(),
        ),
        Kind::Secret => (
            "a string, never shown in a message".to_owned(),
            none(),
            String::new(),
        ),
        Kind::Whole {
            unit,
            default,
            range,
        } => (
            format!("a whole number of {unit}"),
            default.map_or_else(none, |d| d.to_string()),
            shown_range(&range, ""),
        ),
        Kind::Seconds { default, range } => (
            "seconds".to_owned(),
            default.map_or_else(none, |d| d.to_string()),
            shown_range(&range, " s"),
        ),
        Kind::Other { holds } => (holds.to_owned(), none(), String::new()),
        Kind::Ignored => (String::new(), none(), String::new()),
    }
}

/// `1–1000 (below 1 means 1, as upstream)`.
fn shown_range(range: &Range, unit: &str) -> String {
    let mut shown = format!("{}–{}{unit}", range.min, range.max);
    // A clamp is kept only where upstream clamps, so that its configs still load.
    if range.below_min == Beyond::Clamped {
        shown.push_str(&format!(" (below {0} means {0}, as upstream)", range.min));
    }
    if range.above_max == Beyond::Clamped {
        shown.push_str(&format!(" (more means {}, as upstream)", range.max));
    }
    shown
}
