//! Absurd numbers for the bound keys only the reference reads (see `crate::config_extremes`):
//! refused naming the key, or harmless.

use fixtures::prelude::*;
use rstest::rstest;

use crate::config_extremes::judge_absurd_config;

#[rstest]
#[case::max_attempts_4e9(Setting::MaxAttempts, Config::plain().max_attempts(4_000_000_000))]
#[case::max_children_4e9(Setting::MaxChildren, Config::plain().max_children(4_000_000_000))]
#[case::calls_per_hour_4e9(Setting::CallsPerHour, Config::plain().calls_per_hour(4_000_000_000))]
#[case::backoff_1e300(Setting::Backoff, Config::plain().backoff(1e300))]
#[case::backoff_negative(Setting::Backoff, Config::plain().backoff(-5.0))]
#[case::cooldown_1e16(Setting::Cooldown, Config::plain().cooldown(1e16))]
#[case::cooldown_infinite(Setting::Cooldown, Config::plain().cooldown(f64::INFINITY))]
fn absurd_bound_settings_are_refused_or_harmless(#[case] setting: Setting, #[case] config: Config) {
    judge_absurd_config(setting, config);
}
