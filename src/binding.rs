//! Consts of the root file bound from outside it, as `--set` would set them; the checker
//! then checks every shape with those values.
//!
//! - An agent written once for any env of a kind: the consts that its `extern env` names
//!   in its spaces (`observation: f32[OBS]`, `action: discrete(ACTIONS)`, `box(N, LOW,
//!   HIGH)`) take the sizes and bounds of the env it runs on ([`bind`]).
//! - Schedules that follow the run: `TOTAL_STEPS` and `TOTAL_UPDATES` take the length of
//!   the run being trained ([`bind_run`]).

use crate::host::EnvSpec;
use crate::overrides::Override;
use crate::resolve::Program;
use crate::space::ActionSpace;
use crate::syntax::ast::{self, DimExpr, ExprKind, TypeKind};
use serde_json::{Value, json};

/// A const that a space names, and what of the space it stands for.
enum Slot<'a> {
    /// Dimension `i` of the observation.
    ObsDim(usize, &'a ast::Const),
    /// `discrete(N)`'s number of actions, or `box(N, ..)`'s size.
    ActionSize(&'a ast::Const),
    /// `box(N, LOW, HIGH)`'s lower (`false`) or upper (`true`) bound.
    Bound(bool, &'a ast::Const),
}

/// The agent's env, when it is an `extern env` of the root file.
fn extern_env<'p>(prog: &'p Program, agent: &str) -> Option<&'p ast::Env> {
    let root = prog.modules.first()?;
    let ast::Item::Agent(a) = prog.item(*root.scope.get(agent)?) else { return None };
    let r = *root.scope.get(&a.env.name)?;
    match prog.item(r) {
        ast::Item::Env(e) if e.external && r.module == 0 => Some(e),
        _ => None,
    }
}

/// The root file's const called `name`.
fn root_const<'p>(prog: &'p Program, name: &str) -> Option<&'p ast::Const> {
    prog.modules.first()?.ast.items.iter().find_map(|i| match i {
        ast::Item::Const(c) if c.name.name == name => Some(c),
        _ => None,
    })
}

/// The consts the env's spaces name, each with what it stands for.
fn slots<'p>(prog: &'p Program, env: &'p ast::Env) -> Vec<Slot<'p>> {
    let mut out = vec![];
    for m in &env.members {
        match (m.name.name.as_str(), &m.spec) {
            ("observation", ast::EnvSpec::Type(t)) => {
                if let TypeKind::Array { dims, .. } = &t.kind {
                    for (i, d) in dims.iter().enumerate() {
                        if let Some(c) = dim_const(prog, d) {
                            out.push(Slot::ObsDim(i, c));
                        }
                    }
                }
            }
            ("action", ast::EnvSpec::Space { args, .. }) => {
                let named = |e: &ast::Expr| match &e.kind {
                    ExprKind::Name(id) => root_const(prog, &id.name),
                    _ => None,
                };
                for (i, arg) in args.iter().enumerate() {
                    if let Some(c) = named(arg) {
                        out.push(match i {
                            0 => Slot::ActionSize(c),
                            _ => Slot::Bound(i == 2, c),
                        });
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// Whether the env declares `discrete(..)` actions.
fn discrete(env: &ast::Env) -> bool {
    env.members.iter().any(|m| matches!(&m.spec, ast::EnvSpec::Space { kind, .. } if kind.name == "discrete"))
}

fn dim_const<'p>(prog: &'p Program, d: &DimExpr) -> Option<&'p ast::Const> {
    match d {
        DimExpr::Name(id) => root_const(prog, &id.name),
        _ => None,
    }
}

/// Whether the agent's env takes sizes from the env it runs on (then the caller finds that
/// env's spaces and calls [`bind`]).
pub fn takes_sizes(prog: &Program, agent: &str) -> bool {
    extern_env(prog, agent).is_some_and(|e| !slots(prog, e).is_empty())
}

/// The values that the consts named by the agent's `extern env` take from `host`, the
/// spaces of the env `uri` names. A `--set` value in `given` for one of them must agree,
/// and is not repeated in the result.
pub fn bind(
    prog: &Program,
    agent: &str,
    host: &EnvSpec,
    uri: &str,
    given: &[Override],
) -> Result<Vec<Override>, String> {
    let Some(env) = extern_env(prog, agent) else { return Ok(vec![]) };
    let declared = |member: &str| {
        let m = env.members.iter().find(|m| m.name.name == member);
        m.map_or("", |m| &prog.map.source(m.span.file)[m.span.start as usize..m.span.end as usize])
    };
    let mismatch = |what: &str, found: String| {
        format!(
            "`{uri}` {what} `{found}`, but the env `{}` of agent `{agent}` declares `{}`",
            env.name.name,
            declared(if what == "observes" { "observation" } else { "action" })
        )
    };
    let observation = env.members.iter().find(|m| m.name.name == "observation").map(|m| &m.spec);
    if let Some(ast::EnvSpec::Type(ast::Type { kind: TypeKind::Array { dtype, dims }, .. })) = observation
        && (host.obs.shape.len() != dims.len() || host.obs.dtype.name() != dtype.name)
    {
        return Err(mismatch("observes", host.obs.to_string()));
    }
    let mut out: Vec<Override> = vec![];
    for slot in slots(prog, env) {
        let (c, value) = match slot {
            Slot::ObsDim(i, c) => (c, json!(host.obs.shape[i])),
            Slot::ActionSize(c) => match (&host.action, discrete(env)) {
                (ActionSpace::Discrete(n), true) => (c, json!(n)),
                (ActionSpace::Box { n, .. }, false) => (c, json!(n)),
                (a, _) => return Err(mismatch("acts in", a.to_string())),
            },
            Slot::Bound(upper, c) => match &host.action {
                ActionSpace::Box { bounds: Some((lo, hi)), .. } => {
                    (c, bound_value(c, if upper { hi } else { lo }, uri)?)
                }
                a => return Err(mismatch("acts in", a.to_string())),
            },
        };
        let name = &c.name.name;
        let clash = |other: &Value, how: &str| {
            format!("`{name}` is {value} for `{uri}`'s spaces, but {how} {other}: they must agree")
        };
        if let Some(o) = out.iter().find(|o| o.name == *name) {
            if o.value != value {
                return Err(clash(&o.value, "another part of its spaces makes it"));
            }
            continue;
        }
        match given.iter().find(|o| o.name == *name) {
            Some(o) if !same_number(&o.value, &value) => return Err(clash(&o.value, "`--set` gives")),
            Some(_) => {}
            None => out.push(Override { name: name.clone(), value }),
        }
    }
    Ok(out)
}

/// The root consts that hold the run's length, bound by `podc train` (docs/training.md):
/// its env steps (`--total-steps`, of each seed's run, over all devices) and the updates
/// it makes to reach them (whole calls or reports, as the run rounds them).
pub const RUN_LENGTH: [&str; 2] = ["TOTAL_STEPS", "TOTAL_UPDATES"];

/// The values of the [`RUN_LENGTH`] consts that the root file declares, for a run of
/// `total_steps` env steps that makes `total_updates` updates. A value in `given` (a
/// `--set`, or the overrides of a resumed run) must agree, and is not repeated.
pub fn bind_run(
    prog: &Program,
    (total_steps, total_updates): (u64, u64),
    given: &[Override],
) -> Result<Vec<Override>, String> {
    let mut out = vec![];
    for (name, value) in RUN_LENGTH.into_iter().zip([total_steps, total_updates]) {
        if root_const(prog, name).is_none() {
            continue;
        }
        match given.iter().find(|o| o.name == name) {
            Some(o) if !same_number(&o.value, &json!(value)) => {
                return Err(format!(
                    "`{name}` is the run's length, {value} for this run (`--total-steps {total_steps}`), but it is given as {} (by `--set`, or by the run being resumed): give the length with `--total-steps` alone; a resumed run whose schedule reads its length keeps that length",
                    o.value
                ));
            }
            Some(_) => {}
            None => out.push(Override { name: name.to_string(), value: json!(value) }),
        }
    }
    Ok(out)
}

/// A bound as the const's declared type holds it: one number for a scalar const, which
/// the env's bounds must then share across components, else one per component.
fn bound_value(c: &ast::Const, b: &[f32], uri: &str) -> Result<Value, String> {
    let scalar = matches!(&c.ty.kind, TypeKind::Array { dims, .. } if dims.is_empty());
    match b {
        [first, rest @ ..] if scalar && rest.iter().all(|x| x == first) => Ok(json!(first)),
        _ if scalar => Err(format!(
            "`{uri}`'s action bounds differ per component ({b:?}), but `{}` is a scalar: declare it `f32[N]`",
            c.name.name
        )),
        _ => Ok(json!(b)),
    }
}

/// JSON numbers compare by value (`--set OBS=6.0` agrees with 6).
fn same_number(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_number(a, b)),
        _ => a == b || a.as_f64().is_some_and(|x| Some(x) == b.as_f64()),
    }
}

/// The sentence that diagnostics of a program checked with `bound` values end with.
pub fn note(bound: &[Override], uri: &str) -> String {
    let values: Vec<String> = bound.iter().map(|o| format!("`{} = {}`", o.name, o.value)).collect();
    format!("{} from the spaces of `{uri}`", values.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::array::{ArrayTy, DType};

    const AGENT: &str = "
        const OBS: i32 = 4;
        const ACTIONS: i32 = 2;
        const LOW: f32[ACTIONS] = [-1.0, -1.0];
        const HIGH: f32 = 1.0;
        extern env E { observation: OBS_TY, action: SPACE }
        struct M { total: f32 }
        agent A for E {
            fn init(key: Key) -> f32 { 0.0 }
            fn act(l: f32, obs: OBS_TY, key: Key) -> ACTION_TY { ZERO }
            fn update(l: f32, traj: Trajectory<4, 2>, key: Key) -> (f32, M) { (l, M { total: 0.0 }) }
        }";

    /// The agent above with its env's observation type and action space.
    fn program_of(obs: &str, space: &str) -> Program {
        let (action, zero) =
            if space.starts_with("discrete") { ("i32", "0") } else { ("f32[ACTIONS]", "zeros([ACTIONS])") };
        let src =
            AGENT.replace("OBS_TY", obs).replace("SPACE", space).replace("ACTION_TY", action).replace("ZERO", zero);
        let (prog, diags) = crate::driver::check_source("agent.pod", &src, None);
        assert!(diags.is_empty(), "{}", crate::diag::render_plain(&prog.map, &diags));
        prog
    }

    fn program(discrete: bool) -> Program {
        program_of("f32[OBS, 3]", if discrete { "discrete(ACTIONS)" } else { "box(ACTIONS, LOW, HIGH)" })
    }

    fn spec(obs: &[usize], action: ActionSpace) -> EnvSpec {
        EnvSpec { name: "Host".into(), obs: ArrayTy::new(DType::F32, obs.to_vec()), action, time_limit: None }
    }

    fn values(bound: &[Override]) -> Vec<(String, Value)> {
        bound.iter().map(|o| (o.name.clone(), o.value.clone())).collect()
    }

    #[test]
    fn consts_named_by_the_spaces_take_the_hosts_values() {
        let prog = program(true);
        assert!(takes_sizes(&prog, "A"));
        let bound = bind(&prog, "A", &spec(&[6, 3], ActionSpace::Discrete(5)), "u:x", &[]).unwrap();
        assert_eq!(values(&bound), [("OBS".into(), json!(6)), ("ACTIONS".into(), json!(5))]);
        assert_eq!(note(&bound, "u:x"), "`OBS = 6`, `ACTIONS = 5` from the spaces of `u:x`");

        let prog = program(false);
        let host = ActionSpace::Box { n: 3, bounds: Some((vec![-2.0, 0.0, -1.0], vec![0.5; 3])) };
        let bound = bind(&prog, "A", &spec(&[8, 3], host), "u:x", &[]).unwrap();
        let want = [("OBS", json!(8)), ("ACTIONS", json!(3)), ("LOW", json!([-2.0, 0.0, -1.0])), ("HIGH", json!(0.5))];
        assert_eq!(values(&bound), want.map(|(n, v)| (n.to_string(), v)));
    }

    #[test]
    fn spaces_of_another_kind_rank_or_dtype_are_refused_naming_both() {
        let prog = program(true);
        let err = |s: EnvSpec| bind(&prog, "A", &s, "gymnasium:X-v0", &[]).unwrap_err();
        assert_eq!(
            err(spec(&[6], ActionSpace::Discrete(2))),
            "`gymnasium:X-v0` observes `f32[6]`, but the env `E` of agent `A` declares `observation: f32[OBS, 3]`"
        );
        let mut ints = spec(&[6, 3], ActionSpace::Discrete(2));
        ints.obs.dtype = DType::I32;
        assert!(err(ints).starts_with("`gymnasium:X-v0` observes `i32[6, 3]`"));
        assert_eq!(
            err(spec(&[6, 3], ActionSpace::Box { n: 1, bounds: None })),
            "`gymnasium:X-v0` acts in `box(1)`, but the env `E` of agent `A` declares `action: discrete(ACTIONS)`"
        );
        let prog = program(false);
        let host = ActionSpace::Box { n: 2, bounds: Some((vec![-1.0; 2], vec![1.0, 2.0])) };
        let e = bind(&prog, "A", &spec(&[6, 3], host), "u:x", &[]).unwrap_err();
        assert!(e.contains("bounds differ per component") && e.contains("`HIGH` is a scalar"), "{e}");
        let e = bind(&prog, "A", &spec(&[6, 3], ActionSpace::Box { n: 2, bounds: None }), "u:x", &[]).unwrap_err();
        assert!(e.starts_with("`u:x` acts in `box(2)`"), "{e}");
    }

    #[test]
    fn a_set_value_must_agree_and_is_not_repeated() {
        let prog = program(true);
        let host = spec(&[6, 3], ActionSpace::Discrete(5));
        let set = |v: Value| vec![Override { name: "ACTIONS".into(), value: v }];
        let bound = bind(&prog, "A", &host, "u:x", &set(json!(5.0))).unwrap();
        assert_eq!(values(&bound), [("OBS".into(), json!(6))]);
        assert_eq!(
            bind(&prog, "A", &host, "u:x", &set(json!(4))).unwrap_err(),
            "`ACTIONS` is 5 for `u:x`'s spaces, but `--set` gives 4: they must agree"
        );
    }

    #[test]
    fn a_const_named_twice_must_get_one_value() {
        let prog = program_of("f32[OBS, OBS]", "discrete(ACTIONS)");
        let square = bind(&prog, "A", &spec(&[3, 3], ActionSpace::Discrete(2)), "u:x", &[]).unwrap();
        assert_eq!(values(&square)[0], ("OBS".into(), json!(3)));
        let e = bind(&prog, "A", &spec(&[3, 4], ActionSpace::Discrete(2)), "u:x", &[]).unwrap_err();
        assert_eq!(e, "`OBS` is 4 for `u:x`'s spaces, but another part of its spaces makes it 3: they must agree");
    }

    #[test]
    fn the_runs_length_binds_the_consts_the_file_declares() {
        let src =
            "const TOTAL_UPDATES: i32 = 10;\nconst LR: f32 = 0.1;\nfn main() -> f32 { LR * TOTAL_UPDATES as f32 }";
        let (prog, diags) = crate::driver::check_source("a.pod", src, None);
        assert!(diags.is_empty());
        assert_eq!(values(&bind_run(&prog, (1000, 7), &[]).unwrap()), [("TOTAL_UPDATES".into(), json!(7))]);
        let given = |v: Value| vec![Override { name: "TOTAL_UPDATES".into(), value: v }];
        assert!(bind_run(&prog, (1000, 7), &given(json!(7.0))).unwrap().is_empty());
        let e = bind_run(&prog, (1000, 7), &given(json!(8))).unwrap_err();
        assert!(
            e.starts_with(
                "`TOTAL_UPDATES` is the run's length, 7 for this run (`--total-steps 1000`), but it is given as 8"
            ),
            "{e}"
        );
        let (none, _) = crate::driver::check_source("b.pod", "fn main() -> f32 { 1.0 }", None);
        assert!(bind_run(&none, (1000, 7), &given(json!(8))).unwrap().is_empty());
    }

    #[test]
    fn an_env_written_in_full_takes_nothing() {
        let prog = program_of("f32[4, 3]", "discrete(2)");
        assert!(!takes_sizes(&prog, "A"));
    }
}
