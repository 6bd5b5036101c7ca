//! The workspace's programs, apart from the test-support crate: `cargo conformance` (the suite run
//! per target and laid out as a table) and `cargo bench-report`, with what they share.
//!
//! | module | concern |
//! |---|---|
//! | [`workspace`] | the workspace's root and target dir, and nested cargo calls |
//! | [`upstream`] | upstream hermes-agent builds (pinned, or a fix under review) in their own venvs |
//! | [`gaps_draft`] | `--write-gaps`: a gap list drafted from a run's failures, checked to excuse them |
//! | [`report::grid`] | the bound × target grid, counted in tests, with the oracle's row |
//! | [`html`] | the grid as one self-contained HTML page, each count linking to its tests |
//! | [`junit`] | nextest's JUnit report, read with `quick-junit` |
//! | [`preflight`] | what a run needs (nextest, Python, a `--cmd` that answers), checked up front |
//! | [`verdicts`] | the verdict records (`fixtures::verdict::Record`) read back, and shown as the report shows them |
//! | [`progress`] | nextest's status lines turned into "which test, how many left" |
//! | [`verdict_junit`] | the verdicts as JUnit: a known gap is a skip, no verdict an error |
//! | [`report`] | the runs laid out: terminal summary, Markdown table, JSON |

pub mod gaps_draft;
pub mod html;
pub mod junit;
pub mod preflight;
pub mod progress;
pub mod report;
pub mod stand_in;
pub mod upstream;
pub mod verdict_junit;
pub mod verdicts;
pub mod workspace;

/// The built-in target: the `hermes` binary built from this workspace.
pub const REFERENCE: &str = "reference";
/// The pinned upstream build's target name; other upstream builds are `upstream@<slug>`.
pub const UPSTREAM: &str = "upstream";
