//! The `extern env` block that declares a host env's spaces in `.pod` (`podc env describe`).

use super::EnvSpec;
use super::uri::Backend;
use crate::array::ArrayTy;

/// A `.pod` type for an observation: `f32[4]`, or `i32` for a scalar.
pub fn type_text(t: &ArrayTy) -> String {
    if t.shape.is_empty() {
        t.dtype.name().to_string()
    } else {
        let dims: Vec<String> = t.shape.iter().map(|d| d.to_string()).collect();
        format!("{}[{}]", t.dtype.name(), dims.join(", "))
    }
}

/// An identifier for an env ID: the last path segment in UpperCamelCase
/// (`ALE/Pong-v5` → `PongV5`, `CartPole-v1` → `CartPoleV1`, `catch.pod` → `Catch`).
pub fn env_name(backend: Backend, id: &str) -> String {
    let last = id.rsplit('/').next().unwrap_or(id);
    let last = match backend {
        Backend::Pod => last.strip_suffix(".pod").unwrap_or(last),
        _ => last,
    };
    let mut name = String::new();
    for part in last.split(|c: char| !c.is_ascii_alphanumeric()).filter(|p| !p.is_empty()) {
        let mut cs = part.chars();
        if let Some(c) = cs.next() {
            name.push(c.to_ascii_uppercase());
            name.extend(cs);
        }
    }
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert_str(0, "Env");
    }
    name
}

/// `extern env NAME { observation: T, action: discrete(N), time_limit: L }` (or `box(N, ..)`),
/// with a comment naming where it came from.
pub fn extern_block(uri: &str, spec: &EnvSpec) -> String {
    let mut members = vec![format!("observation: {}", type_text(&spec.obs)), format!("action: {}", spec.action)];
    if let Some(t) = spec.time_limit {
        members.push(format!("time_limit: {t}"));
    }
    format!(
        "// The spaces of `{uri}`, as `podc env describe` reports them.\nextern env {} {{ {} }}\n",
        spec.name,
        members.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::array::DType;

    #[test]
    fn names_and_blocks() {
        assert_eq!(env_name(Backend::Gymnasium, "ALE/Pong-v5"), "PongV5");
        assert_eq!(env_name(Backend::Gymnasium, "CartPole-v1"), "CartPoleV1");
        assert_eq!(env_name(Backend::Pod, "examples/envs/catch.pod"), "Catch");
        assert_eq!(env_name(Backend::EnvPool, "1x-v0"), "Env1xV0");
        assert_eq!(env_name(Backend::Ale, "Pong"), "Pong");
        assert_eq!(env_name(Backend::Ale, "ms_pacman"), "MsPacman");
        let spec = EnvSpec {
            name: "AcrobotV1".into(),
            obs: ArrayTy::new(DType::F32, vec![6]),
            action: crate::host::ActionSpace::Discrete(3),
            time_limit: Some(500),
        };
        assert_eq!(
            extern_block("gymnasium:Acrobot-v1", &spec),
            "// The spaces of `gymnasium:Acrobot-v1`, as `podc env describe` reports them.\n\
             extern env AcrobotV1 { observation: f32[6], action: discrete(3), time_limit: 500 }\n"
        );
        let pendulum = EnvSpec {
            name: "PendulumV1".into(),
            obs: ArrayTy::new(DType::F32, vec![3]),
            action: crate::host::ActionSpace::Box { n: 1, bounds: Some((vec![-2.0], vec![2.0])) },
            time_limit: Some(200),
        };
        assert!(
            extern_block("gymnasium:Pendulum-v1", &pendulum).ends_with(
                "extern env PendulumV1 { observation: f32[3], action: box(1, -2.0, 2.0), time_limit: 200 }\n"
            )
        );
    }
}
