//! The settings of `ale:GAME` envs: the standard Atari preprocessing (Mnih et al. 2015,
//! with the sticky actions and full episodes of Machado et al. 2018), every key a URI may
//! set, its default, and its check. The worker receives all of them, defaults included,
//! so that the defaults live here alone (`docs/sebulba.md#atari` lists them).

use super::uri::KwValue;

/// One setting: its URI key, its default, and the smallest value it takes (for numbers).
pub struct Setting {
    pub key: &'static str,
    pub default: KwValue,
    min: f64,
    max: f64,
}

const fn int(key: &'static str, default: i64, min: i64) -> Setting {
    Setting { key, default: KwValue::Int(default), min: min as f64, max: f64::INFINITY }
}

const fn flag(key: &'static str, default: bool) -> Setting {
    Setting { key, default: KwValue::Bool(default), min: 0.0, max: 0.0 }
}

/// Every `ale:` setting in the order the worker gets them.
pub const SETTINGS: &[Setting] = &[
    // Emulator frames per agent step (the action repeated); rewards are summed over them.
    int("frameskip", 4, 1),
    // Max over the last two frames of a skip (Atari sprites flicker).
    flag("maxpool", true),
    // Frames stacked in one observation, oldest first.
    int("stack_num", 4, 1),
    int("img_height", 84, 1),
    int("img_width", 84, 1),
    // Grayscale frames; `false` keeps RGB as a last axis of 3.
    flag("grayscale", true),
    // A reset plays a uniformly random number of no-ops, at most this many.
    int("noop_max", 30, 0),
    // Sticky actions: each frame repeats the previous action with this probability.
    Setting { key: "repeat_action_probability", default: KwValue::Float(0.25), min: 0.0, max: 1.0 },
    // The game's minimal action set (`true`: all 18 actions).
    flag("full_action_space", false),
    // A life lost ends the episode (terminated); the game goes on from there.
    flag("episodic_life", false),
    // Rewards clipped to their sign.
    flag("reward_clip", false),
    // FIRE after a reset in games that need it to start.
    flag("use_fire_reset", true),
    // Agent steps after which an episode is truncated: 108,000 frames at frameskip 4.
    int("max_episode_steps", 27000, 1),
    // ale-py's thread pool per worker; 0: one thread per core.
    int("num_threads", 0, 0),
];

/// Checks the settings a URI gives, each a known key with a value of its kind.
pub fn check(kwargs: &[(String, KwValue)]) -> Result<(), String> {
    for (key, value) in kwargs {
        let Some(s) = SETTINGS.iter().find(|s| s.key == key) else {
            let keys: Vec<&str> = SETTINGS.iter().map(|s| s.key).collect();
            return Err(format!("`{key}` is not a setting of `ale:` envs; they are {}", keys.join(", ")));
        };
        let ok = match (&s.default, value) {
            (KwValue::Bool(_), KwValue::Bool(_)) => true,
            (KwValue::Int(_), KwValue::Int(v)) => (*v as f64) >= s.min,
            (KwValue::Float(_), KwValue::Int(v)) => (s.min..=s.max).contains(&(*v as f64)),
            (KwValue::Float(_), KwValue::Float(v)) => (s.min..=s.max).contains(v),
            _ => false,
        };
        if !ok {
            let want = match s.default {
                KwValue::Bool(_) => "`true` or `false`".to_string(),
                KwValue::Int(_) => format!("an integer ≥ {}", s.min),
                _ => format!("a number from {} to {}", s.min, s.max),
            };
            return Err(format!("`{key}={value}`: expected {want}"));
        }
    }
    Ok(())
}

/// Every setting, as given or its default, for the worker (after [`check`]).
pub fn settings(kwargs: &[(String, KwValue)]) -> Vec<(String, KwValue)> {
    SETTINGS
        .iter()
        .map(|s| {
            let given = kwargs.iter().find(|(k, _)| k == s.key).map(|(_, v)| v);
            let value = match (&s.default, given) {
                (KwValue::Float(_), Some(KwValue::Int(v))) => KwValue::Float(*v as f64),
                (_, Some(v)) => v.clone(),
                (d, None) => d.clone(),
            };
            (s.key.to_string(), value)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kw(pairs: &[(&str, KwValue)]) -> Vec<(String, KwValue)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }

    #[test]
    fn defaults_and_overrides() {
        let all =
            settings(&kw(&[("reward_clip", KwValue::Bool(true)), ("repeat_action_probability", KwValue::Int(0))]));
        assert_eq!(all.len(), SETTINGS.len());
        let get = |k: &str| all.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone()).unwrap();
        assert_eq!(get("reward_clip"), KwValue::Bool(true));
        assert_eq!(get("repeat_action_probability"), KwValue::Float(0.0));
        assert_eq!(get("frameskip"), KwValue::Int(4));
        assert_eq!(get("max_episode_steps"), KwValue::Int(27000));
        assert_eq!(get("episodic_life"), KwValue::Bool(false));
    }

    #[test]
    fn rejects_unknown_keys_and_bad_values() {
        for (pairs, says) in [
            (
                kw(&[("frame_skip", KwValue::Int(4))]),
                "`frame_skip` is not a setting of `ale:` envs; they are frameskip,",
            ),
            (kw(&[("frameskip", KwValue::Int(0))]), "`frameskip=0`: expected an integer ≥ 1"),
            (kw(&[("frameskip", KwValue::Float(2.5))]), "expected an integer"),
            (kw(&[("episodic_life", KwValue::Int(1))]), "`episodic_life=1`: expected `true` or `false`"),
            (kw(&[("repeat_action_probability", KwValue::Float(1.5))]), "expected a number from 0 to 1"),
            (kw(&[("noop_max", KwValue::Str("x".into()))]), "`noop_max=x`"),
        ] {
            let e = check(&pairs).unwrap_err();
            assert!(e.contains(says), "{e}");
        }
        assert!(check(&kw(&[("noop_max", KwValue::Int(0)), ("grayscale", KwValue::Bool(false))])).is_ok());
    }
}
