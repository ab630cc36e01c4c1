//! Env URIs: `gymnasium:ID?k=v&...`, `envpool:ID?...`, `ale:GAME?...`, `pod:FILE.pod[?env=NAME]`.
//!
//! Keyword values are typed as Python would want them: `true`/`false` (any case) are
//! bools, then integers, then floats, else strings (`frameskip=4` is an int,
//! `repeat_action_probability=0.25` a float, `render_mode=rgb_array` a string).

use super::HostError;
use serde_json::Value;
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Gymnasium,
    EnvPool,
    Ale,
    Pod,
}

impl Backend {
    /// The backend a URI's scheme names.
    pub fn from_scheme(scheme: &str) -> Option<Backend> {
        [Backend::Gymnasium, Backend::EnvPool, Backend::Ale, Backend::Pod].into_iter().find(|b| b.scheme() == scheme)
    }

    pub fn scheme(self) -> &'static str {
        match self {
            Backend::Gymnasium => "gymnasium",
            Backend::EnvPool => "envpool",
            Backend::Ale => "ale",
            Backend::Pod => "pod",
        }
    }
}

/// A keyword argument's value.
#[derive(Clone, Debug, PartialEq)]
pub enum KwValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

impl KwValue {
    fn parse(s: &str) -> KwValue {
        if s.eq_ignore_ascii_case("true") {
            KwValue::Bool(true)
        } else if s.eq_ignore_ascii_case("false") {
            KwValue::Bool(false)
        } else if let Ok(i) = s.parse::<i64>() {
            KwValue::Int(i)
        } else if let Some(f) = s.parse::<f64>().ok().filter(|f| f.is_finite()) {
            KwValue::Float(f)
        } else {
            KwValue::Str(s.to_string())
        }
    }

    pub fn to_json(&self) -> Value {
        match self {
            KwValue::Bool(b) => Value::Bool(*b),
            KwValue::Int(i) => Value::from(*i),
            KwValue::Float(f) => Value::from(*f),
            KwValue::Str(s) => Value::String(s.clone()),
        }
    }
}

impl fmt::Display for KwValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KwValue::Bool(b) => write!(f, "{b}"),
            KwValue::Int(i) => write!(f, "{i}"),
            KwValue::Float(x) => write!(f, "{x:?}"),
            KwValue::Str(s) => f.write_str(s),
        }
    }
}

/// A parsed env URI.
#[derive(Clone, Debug, PartialEq)]
pub struct EnvUri {
    pub backend: Backend,
    /// The env ID (`CartPole-v1`, `ALE/Pong-v5`), the game for `ale:` (`Pong`) or, for
    /// `pod:`, the file.
    pub id: String,
    /// Keyword arguments in the order written.
    pub kwargs: Vec<(String, KwValue)>,
}

const FORMS: &str = "`gymnasium:ID`, `envpool:ID`, `ale:GAME` (all with optional `?key=value&...`) or `pod:FILE.pod`";

impl EnvUri {
    pub fn parse(uri: &str) -> Result<EnvUri, HostError> {
        let bad = |why: String| HostError::Uri(format!("`{uri}`: {why}; the forms are {FORMS}"));
        let Some((scheme, rest)) = uri.split_once(':') else {
            return Err(bad("no backend before a `:`".into()));
        };
        let Some(backend) = Backend::from_scheme(scheme) else {
            return Err(bad(format!("unknown backend `{scheme}`")));
        };
        let (id, query) = match rest.split_once('?') {
            Some((id, q)) => (id, Some(q)),
            None => (rest, None),
        };
        if id.trim().is_empty() {
            return Err(bad(format!("no env after `{scheme}:`")));
        }
        if id.chars().any(char::is_whitespace) {
            return Err(bad(format!("`{id}` contains whitespace")));
        }
        let mut kwargs: Vec<(String, KwValue)> = vec![];
        for pair in query.into_iter().flat_map(|q| q.split('&')).filter(|p| !p.is_empty()) {
            let Some((k, v)) = pair.split_once('=') else {
                return Err(bad(format!("`{pair}` is not `key=value`")));
            };
            let is_ident = k.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !is_ident {
                return Err(bad(format!("`{k}` is not a keyword argument name")));
            }
            if kwargs.iter().any(|(seen, _)| seen == k) {
                return Err(bad(format!("`{k}` is given twice")));
            }
            kwargs.push((k.to_string(), KwValue::parse(v)));
        }
        if backend == Backend::Ale {
            super::atari::check(&kwargs).map_err(|why| HostError::Uri(format!("`{uri}`: {why}")))?;
        }
        Ok(EnvUri { backend, id: id.to_string(), kwargs })
    }

    /// The keyword arguments as a JSON object, for the worker: for `ale:`, every setting,
    /// defaults included.
    pub fn kwargs_json(&self) -> Value {
        let all;
        let kwargs = match self.backend {
            Backend::Ale => {
                all = super::atari::settings(&self.kwargs);
                &all
            }
            Backend::Gymnasium | Backend::EnvPool | Backend::Pod => &self.kwargs,
        };
        Value::Object(kwargs.iter().map(|(k, v)| (k.clone(), v.to_json())).collect())
    }
}

impl fmt::Display for EnvUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.backend.scheme(), self.id)?;
        for (i, (k, v)) in self.kwargs.iter().enumerate() {
            write!(f, "{}{k}={v}", if i == 0 { '?' } else { '&' })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms() {
        let u = EnvUri::parse(
            "gymnasium:ALE/Pong-v5?frameskip=4&repeat_action_probability=0.25&full_action_space=False&mode=x",
        )
        .unwrap();
        assert_eq!(u.backend, Backend::Gymnasium);
        assert_eq!(u.id, "ALE/Pong-v5");
        assert_eq!(
            u.kwargs,
            vec![
                ("frameskip".into(), KwValue::Int(4)),
                ("repeat_action_probability".into(), KwValue::Float(0.25)),
                ("full_action_space".into(), KwValue::Bool(false)),
                ("mode".into(), KwValue::Str("x".into())),
            ]
        );
        assert_eq!(
            u.to_string(),
            "gymnasium:ALE/Pong-v5?frameskip=4&repeat_action_probability=0.25&full_action_space=false&mode=x"
        );
        assert_eq!(EnvUri::parse("envpool:CartPole-v1").unwrap().backend, Backend::EnvPool);
        let ale = EnvUri::parse("ale:Pong?episodic_life=true&reward_clip=TRUE&max_episode_steps=50").unwrap();
        assert_eq!((ale.backend, ale.id.as_str()), (Backend::Ale, "Pong"));
        assert_eq!(ale.to_string(), "ale:Pong?episodic_life=true&reward_clip=true&max_episode_steps=50");
        let sent = ale.kwargs_json();
        assert_eq!((sent["frameskip"].as_i64(), sent["max_episode_steps"].as_i64()), (Some(4), Some(50)));
        assert_eq!(sent["reward_clip"].as_bool(), Some(true));
        let p = EnvUri::parse("pod:examples/envs/catch.pod").unwrap();
        assert_eq!((p.backend, p.id.as_str()), (Backend::Pod, "examples/envs/catch.pod"));
        assert_eq!(
            u.kwargs_json().to_string(),
            r#"{"frameskip":4,"repeat_action_probability":0.25,"full_action_space":false,"mode":"x"}"#
        );
    }

    #[test]
    fn rejects_the_rest_clearly() {
        for (bad, says) in [
            ("CartPole-v1", "no backend"),
            ("gym:CartPole-v1", "unknown backend `gym`"),
            ("gymnasium:", "no env after"),
            ("gymnasium:CartPole-v1?frameskip", "not `key=value`"),
            ("gymnasium:X?a=1&a=2", "given twice"),
            ("gymnasium:X?1a=1", "not a keyword argument name"),
            ("envpool:a b", "whitespace"),
        ] {
            let e = EnvUri::parse(bad).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("the forms are"), "{bad}: {e}");
        }
        let e = EnvUri::parse("ale:Pong?sticky=0.25").unwrap_err().to_string();
        assert!(
            e.contains("`ale:Pong?sticky=0.25`: `sticky` is not a setting of `ale:` envs; they are frameskip"),
            "{e}"
        );
    }
}
