//! Parser tests: snapshots of the printed tree for valid programs, precedence and lexing
//! checks, snapshots of the diagnostics for `tests/ui/parse/*.pod`, and a no-panic sweep.

use super::ast::{EnvSpec, Expr, ExprKind, Item, Module, TypeKind};
use super::lexer::lex;
use super::parse;
use super::print::{print_expr, print_module};
use super::token::Tok;
use crate::diag::{Diag, SourceMap, render_plain};

/// Parses a program that must be valid, failing with the rendered errors otherwise.
fn parse_ok(src: &str) -> Module {
    let (m, diags) = parse(0, src);
    assert!(diags.is_empty(), "unexpected errors:\n{}", render(src, &diags));
    m
}

/// The printed tree of a valid program.
fn ast(src: &str) -> String {
    print_module(&parse_ok(src))
}

/// The printed tree of one expression, parsed as the body of a function.
fn expr(src: &str) -> String {
    let m = parse_ok(&format!("fn t() -> f32 {{ {src} }}"));
    match m.items.first() {
        Some(Item::Fn(f)) => print_expr(&f.body.value),
        other => panic!("expected a function, got {other:?}"),
    }
}

fn render(src: &str, diags: &[Diag]) -> String {
    let mut map = SourceMap::default();
    map.add("test.pod", src);
    render_plain(&map, diags)
}

/// The codes of the diagnostics for `src`, in order.
fn codes(src: &str) -> Vec<&'static str> {
    parse(0, src).1.iter().map(|d| d.code).collect()
}

fn tokens(src: &str) -> Vec<Tok<'_>> {
    let lexed = lex(0, src);
    assert!(lexed.diags.is_empty(), "unexpected lexer errors: {:?}", lexed.diags);
    lexed.tokens.into_iter().map(|(_, t, _)| t).collect()
}

// ----- valid programs

#[test]
fn items() {
    insta::assert_snapshot!(ast(r"
        use std::nn::{Mlp, mlp};
        use basics::dense::Dense;
        use a::b::{c,};
        const ROWS: i32 = 10;
        const SCALE: f32 = 2.5e-1;
        struct Empty {}
        struct State { x: f32, n: i32 }
        struct Dense<I, O> { w: f32[I, O], b: f32[O], }
        fn dense<I, O>(p: Dense<I, O>, x: f32[I]) -> f32[O] { tanh(x @ p.w + p.b) }
        fn unit() -> () { () }
        fn noargs<N,>() -> f32[N] { zeros() }
    "));
}

#[test]
fn types() {
    insta::assert_snapshot!(ast(r"
        fn f(
            a: f32, b: i32[3], c: bool[N, 4], d: u32[], e: Key, f: Dense<4, O>, g: Foo[2],
            h: (f32, i32[3]), i: (), j: (f32,), k: (f32), l: ((), (Key, Step<S>)),
            m: Adam<Params<C, A>>, n: Pair<2 * N, (T, f32[K])>, o: Wrap<f32[3], P>,
        ) -> (f32, (i32,)) { a }
    "));
}

#[test]
fn statements_and_patterns() {
    insta::assert_snapshot!(ast(r"
        fn f(x: f32) -> f32 {
            let a = x;
            let _ = a;
            let b: f32[3] = [a, a, a];
            let (c, (d, _)) = (a, (b, a));
            let (e,) = (a,);
            let ((g)) = a;
            let h: (f32, i32) = (1.0, 2);
            a + c
        }
    "));
}

#[test]
fn expressions() {
    insta::assert_snapshot!(ast(r"
        fn f(p: Params, t: (f32, (i32, f32)), m: f32[4, 4]) -> f32 {
            let lits = (1, 1_000, 1.5, 1e-3, 2.5E+4, 1.0e5, true, false, ());
            let arrays = ([], [1], [1, 2, 3,], [[1.0, 2.0], [3.0, 4.0]]);
            let tuples = ((1), (1,), (1, 2), (1, 2,));
            let s = State { x: 1.0, n, y: (n) };
            let fields = (p.policy.w, t.0, t.1.0, t.1.1, p.w.0);
            let calls = (f(), g(1), h(1, 2,), m.sum(), m.set([1, 2], 9.0).set(0, 1.0));
            let idx = (m[0], m[0, 1], m[:, 0], m[1:3], m[:2], m[2:], m[i + 1, :], m[0][1]);
            let ops = (-x, !b, x as i32, -x as f32, x as i32 as f32, 2 ** -1);
            let blk = { let y = 1; y };
            s.x
        }
    "));
}

#[test]
fn control_flow() {
    insta::assert_snapshot!(ast(r"
        fn f(s: State, go: bool) -> State {
            let a = if go { 1 } else { 2 };
            let b = if go { 1 } else if s.n > 2 { 2 } else { let z = 3; z };
            let c = if x == N { State { x: 1.0 } } else { s };
            let d = if (S { x: 1 }).x > 0 { 1 } else { 0 };
            let e = for i in 0..10 carry (s, p) = (0, 1.0) { (s + i, p * 1.5) };
            let g = for _ in N - 1..2 * N carry acc = init { let t = acc + 1; t };
            if go { State { x: s.x + 1.0, n: s.n + 1 } } else if s.n > 2 { s } else { State { x: 0.0, n: 0 } }
        }
    "));
}

/// Long expressions break after their head, one child a line.
#[test]
fn long_lines_break() {
    insta::assert_snapshot!(ast(r"
        fn loss(p: Params, obs: f32[B, 50], actions: i32[B], returns: f32[B]) -> f32 {
            let logits = mlp(p.policy, obs) - logsumexp(mlp(p.policy, obs), 1)[:, None];
            mean(-take_along(logits, actions) * (returns - mlp(p.value, obs)[:, 0])) + 0.5 * mean((returns - mlp(p.value, obs)[:, 0]) ** 2)
        }
    "));
}

#[test]
fn envs() {
    insta::assert_snapshot!(ast(r"
        const ROWS: i32 = 10;
        env Catch {
            observation: f32[ROWS, COLS]
            action: discrete(3)
            time_limit: 500

            fn reset(key: Key) -> State { State { x: 0 } }
            fn step(s: State, a: i32, key: Key) -> Step<State> {
                let r = 1.0;
                Step { state: s, reward: r, terminated: false, truncated: false }
            }
            fn observe(s: State) -> f32[ROWS, COLS] { zeros([ROWS, COLS]) }
        }
        env Kinds {
            a: f32, b: Foo; c: Dense<3, N>,
            fn f() -> f32 { 1.0 }
            d: (f32, i32[2]); e: (), g: box(ROWS, 4), h: discrete(0x10,);
            i: none()
            j: 0x1F4
        }
        env Empty {}
        env Fns { fn a() -> f32 { 1.0 } fn b() -> f32 { a() } }
        extern env Pong { observation: f32[128], action: discrete(6), time_limit: 27000 }
        fn after() -> f32 { 1.0 }
    "));
}

/// Which member is which: a type, a space or an integer.
#[test]
fn env_members() {
    let m = parse_ok("env E { a: f32[2, N], b: discrete(3), c: 500, d: State, e: none() }");
    let Some(Item::Env(e)) = m.items.first() else { panic!("expected an env") };
    assert_eq!(e.name.name, "E");
    assert!(e.fns.is_empty());
    let names: Vec<&str> = e.members.iter().map(|m| m.name.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c", "d", "e"]);
    let text = |s: super::span::Span| {
        &"env E { a: f32[2, N], b: discrete(3), c: 500, d: State, e: none() }"[s.start as usize..s.end as usize]
    };
    assert!(
        matches!(&e.members[0].spec, EnvSpec::Type(t) if matches!(&t.kind, TypeKind::Array { dims, .. } if dims.len() == 2))
    );
    let EnvSpec::Space { kind, args, span } = &e.members[1].spec else { panic!("expected a space") };
    assert_eq!((kind.name.as_str(), text(*span)), ("discrete", "discrete(3)"));
    assert!(matches!(args.as_slice(), [Expr { kind: ExprKind::Int(3), .. }]));
    assert!(matches!(&e.members[2].spec, EnvSpec::Int(500, s) if text(*s) == "500"));
    assert!(
        matches!(&e.members[3].spec, EnvSpec::Type(t) if matches!(&t.kind, TypeKind::Named { args, .. } if args.is_empty()))
    );
    assert!(matches!(&e.members[4].spec, EnvSpec::Space { args, .. } if args.is_empty()));
    assert_eq!(text(e.members[1].span), "b: discrete(3)", "a member's span leaves out its separator");
    assert_eq!(text(e.span), "env E { a: f32[2, N], b: discrete(3), c: 500, d: State, e: none() }");
}

#[test]
fn empty_file_and_comments_only() {
    assert_eq!(ast(""), "");
    assert_eq!(ast("// nothing\n/* at /* all */ */"), "");
}

// ----- precedence

#[test]
fn precedence() {
    let cases = [
        ("a || b && c", "(|| a (&& b c))"),
        ("a && b || c", "(|| (&& a b) c)"),
        ("a == b && c != d", "(&& (== a b) (!= c d))"),
        ("a < b + c", "(< a (+ b c))"),
        ("a + b * c", "(+ a (* b c))"),
        ("a - b - c", "(- (- a b) c)"),
        ("a / b * c % d", "(% (* (/ a b) c) d)"),
        ("x @ w + b", "(+ (@ x w) b)"),
        ("a * b as f32", "(* a (as b f32))"),
        ("x as i32 as f32", "(as (as x i32) f32)"),
        ("-x as f32", "(as (neg x) f32)"),
        ("-x ** 2", "(neg (** x 2))"),
        ("2 ** -1", "(** 2 (neg 1))"),
        ("a ** b ** c", "(** a (** b c))"),
        ("!a == b", "(== (not a) b)"),
        ("- -x", "(neg (neg x))"),
        ("a.b.c(d)[0] ** 2", "(** (index (method c (field a b) d) 0) 2)"),
        ("(a + b) * c", "(* (+ a b) c)"),
        ("-(a)", "(neg a)"),
        ("f(x)[1:] .0", "(field (index (call f x) (: 1 _)) 0)"),
        ("if a { b } else { c } + 1", "(+ (if a b c) 1)"),
        ("{ a } * 2", "(* (block a) 2)"),
        ("0x10 + 0X1f * 2", "(+ 16 (* 31 2))"),
        ("-0xFF as u32", "(as (neg 255) u32)"),
    ];
    for (src, want) in cases {
        assert_eq!(expr(src), want, "parsing `{src}`");
    }
}

#[test]
fn comparisons_do_not_chain() {
    assert_eq!(codes("fn f() -> bool { a < b < c }"), ["E0006"]);
    assert_eq!(codes("fn f() -> bool { a == b != c <= d }"), ["E0006", "E0006"]);
    assert_eq!(expr("(a < b) < c"), "(< (< a b) c)");
    assert_eq!(expr("a < b && b < c"), "(&& (< a b) (< b c))");
}

#[test]
fn struct_literals_not_in_conditions() {
    // `N { ... }` would be a struct literal; in a condition the `{` opens the branch.
    assert_eq!(expr("if x == N { 1 } else { 2 }"), "(if (== x N) 1 2)");
    assert_eq!(expr("for i in 0..N carry s = S { s }"), "(for i (range 0 N) (carry s S) s)");
    assert_eq!(expr("if f(S { x: 1 }) { 1 } else { 2 }"), "(if (call f (struct S (x: 1))) 1 2)");
    assert_eq!(expr("if [S { x: 1 }][0].x { 1 } else { 2 }"), "(if (field (index (array (struct S (x: 1))) 0) x) 1 2)");
}

// ----- spans

#[test]
fn spans_cover_the_whole_text() {
    let src = "fn f(x: f32) -> f32 { let y = (x + 1) * 2; -y.0 ** 2 }";
    let m = parse_ok(src);
    let Some(Item::Fn(f)) = m.items.first() else { panic!("expected a function") };
    let text = |s: super::span::Span| &src[s.start as usize..s.end as usize];
    assert_eq!(text(f.span), src);
    assert_eq!(text(f.body.span), "{ let y = (x + 1) * 2; -y.0 ** 2 }");
    let stmt = &f.body.stmts[0];
    assert_eq!(text(stmt.span), "let y = (x + 1) * 2;");
    assert_eq!(text(stmt.value.span), "(x + 1) * 2");
    let ExprKind::Binary(_, lhs, _) = &stmt.value.kind else { panic!("expected a product") };
    assert_eq!(text(lhs.span), "(x + 1)");
    assert_eq!(text(f.body.value.span), "-y.0 ** 2");
    let ExprKind::Unary(_, pow) = &f.body.value.kind else { panic!("expected a negation") };
    let ExprKind::Binary(_, base, _) = &pow.kind else { panic!("expected a power") };
    let ExprKind::TupleField(_, 0, index) = &base.kind else { panic!("expected a tuple field") };
    assert_eq!(text(base.span), "y.0");
    assert_eq!(text(*index), "0");
}

// ----- lexer

#[test]
fn floats_ranges_and_tuple_fields() {
    use Tok::*;
    assert_eq!(tokens("0..10"), [Int(0), DotDot, Int(10)]);
    assert_eq!(
        tokens("1.5 1e-3 2.5E+4 1.0e5 1_000.5"),
        [Float(1.5), Float(1e-3), Float(2.5e4), Float(1.0e5), Float(1000.5)]
    );
    assert_eq!(tokens("1. 1.e3"), [Int(1), Dot, Int(1), Dot, Name("e3")]);
    assert_eq!(tokens("t.0"), [Name("t"), Dot, Int(0)]);
    // `0.1` after a dot is two tuple fields, not a float.
    assert_eq!(tokens("t.0.1"), [Name("t"), Dot, Int(0), Dot, Int(1)]);
    assert_eq!(tokens("x.0..3"), [Name("x"), Dot, Int(0), DotDot, Int(3)]);
    assert_eq!(tokens("1_000 _ _x x_1"), [Int(1000), Underscore, Name("_x"), Name("x_1")]);
}

#[test]
fn hex_literals() {
    use Tok::*;
    assert_eq!(
        tokens("0x0 0x1BD11BDA 0xFFFF_FFFF 0X_ff 0xdead_BEEF 0xFFFFFFFFFFFFFFFF"),
        [Int(0), Int(0x1BD1_1BDA), Int(0xFFFF_FFFF), Int(0xFF), Int(0xDEAD_BEEF), Int(u64::MAX)]
    );
    // Only a leading `0x` makes a hexadecimal literal.
    assert_eq!(tokens("10x x0x1 0 x1"), [Int(10), Name("x"), Name("x0x1"), Int(0), Name("x1")]);
    assert_eq!(tokens("t.0x1"), [Name("t"), Dot, Int(1)]);
    assert_eq!(expr("0x1BD11BDA"), "466688986");
    assert_eq!(codes("const A: u32 = 0x1_0000_0000_0000_0000;"), ["E0005"]);
    assert_eq!(codes("const A: u32 = 0xFFFF_FFFF_FFFF_FFFF_F;"), ["E0005"]);
    // A bad digit or no digit at all is one error, and the parse goes on as for an integer.
    assert_eq!(codes("const A: u32 = 0xFG; const B: u32 = 0x; const C: u32 = 0x__;"), ["E0003", "E0003", "E0003"]);
    let (_, diags) = parse(0, "fn f() -> u32 { 0x12z4 + 1 }");
    let d = diags.first().map(|d| (d.message.as_str(), d.primary.1.as_str()));
    assert_eq!(d, Some(("invalid hexadecimal literal `0x12z4`", "`z` is not a hexadecimal digit")));
    assert_eq!(diags.len(), 1);
}

#[test]
fn keywords_and_punctuation() {
    use Tok::*;
    assert_eq!(
        tokens("use const struct fn env let if else for in carry as true false iff envs"),
        [Use, Const, Struct, Fn, Env, Let, If, Else, For, In, Carry, As, True, False, Name("iff"), Name("envs")]
    );
    assert_eq!(
        tokens("()[]{},;: :: . .. -> = + - * / % ** @ == != < <= > >= && || !"),
        [
            LParen, RParen, LBracket, RBracket, LBrace, RBrace, Comma, Semi, Colon, PathSep, Dot, DotDot, Arrow,
            Assign, Plus, Minus, Star, Slash, Percent, StarStar, At, EqEq, Ne, Lt, Le, Gt, Ge, AndAnd, OrOr, Bang
        ]
    );
}

#[test]
fn comments_nest() {
    use Tok::*;
    assert_eq!(tokens("a /* b /* c */ d */ e // f\ng"), [Name("a"), Name("e"), Name("g")]);
    assert_eq!(tokens("a /**/ b /* ** / */ c"), [Name("a"), Name("b"), Name("c")]);
    assert_eq!(codes("/* a /* b */"), ["E0004"]);
}

#[test]
fn lexer_errors_recover() {
    assert_eq!(codes("fn f() -> i32 { 1 $ }"), ["E0003"]);
    assert_eq!(codes("fn f() -> i32 { 1 } # fn g() -> i32 { 2 € }"), ["E0003", "E0003"]);
    assert_eq!(codes("const A: i32 = 99999999999999999999;"), ["E0005"]);
    assert_eq!(codes("fn f(t: T) -> i32 { t.99999999999 }"), ["E0005"]);
    // A run of bad characters is one error, and the parse error it causes is not repeated.
    let (m, diags) = parse(0, "fn f() -> i32 { 1 $$$ + 2 }");
    assert_eq!(diags.len(), 1, "{diags:?}");
    assert_eq!(m.items.len(), 1);
}

// ----- errors

#[test]
fn recovery_keeps_good_items() {
    let src =
        "fn a() -> i32 { 1 + }\nfn b() -> i32 { 2 }\nfn c() -> i32 { let x = 1 let y = 2; y }\nstruct S { x: f32 }";
    let (m, diags) = parse(0, src);
    assert_eq!(diags.iter().map(|d| d.code).collect::<Vec<_>>(), ["E0001", "E0001"]);
    assert_eq!(
        print_module(&m),
        "(fn b -> i32\n  2)\n\n(fn c -> i32\n  y)\n\n(struct S\n  (x: f32))\n",
        "the broken `let` is dropped from `c`"
    );
}

#[test]
fn messages() {
    let cases = [
        ("fn f(a: f32; b: f32) -> f32 { a }", "expected one of `)`, `,`, `<` or `[`, found `;`", None),
        (
            "fn f() -> f32 { let a = 1 a }",
            "expected `;` or an operator, found identifier `a`",
            Some("add `;` after the `let` statement"),
        ),
        (
            "const A: i32 = 1",
            "unexpected end of file, expected `;` or an operator",
            Some("add `;` after the `const` item"),
        ),
        ("fn f() -> f32 { let a = ; a }", "expected an expression, found `;`", None),
        (
            "fn f() -> f32 { let a = 1; }",
            "expected `let` or an expression, found `}`",
            Some("a block must end with an expression, which is its value"),
        ),
        (
            "fn f() -> f32 { if a { 1 } }",
            "expected `else`, found `}`",
            Some("`if` is an expression, so it needs an `else` branch"),
        ),
        (
            "fn f() -> f32 { if a = 1 { 1 } else { 2 } }",
            "expected `{` or an operator, found `=`",
            Some("to compare two values, use `==`"),
        ),
        (
            "fn f() -> f32 { for i in 0..3 { i } }",
            "expected `carry`, found `{`",
            Some("a `for` loop carries a value: `for i in 0..N carry acc = init { ... }`"),
        ),
        (
            "fn f() -> f32 { if s == S { x: 1 } { 1 } else { 2 } }",
            "expected `}`, found `:`",
            Some("a struct literal in an `if` condition or a `for` header needs parentheses: `(S { .. })`"),
        ),
        ("fn 1", "expected an identifier, found integer `1`", None),
        (
            "let x = 1;",
            "expected one of `agent`, `const`, `env`, `extern`, `fn`, `struct` or `use`, found keyword `let`",
            None,
        ),
        (
            "env E { let x = 1; }",
            "expected a member (`name: type`) or `fn`, found keyword `let`",
            Some(
                "`let` statements go inside functions; an `env` body holds members, such as \
                 `action: discrete(3)`, and `fn` items",
            ),
        ),
        (
            "env E { 1 + 2 }",
            "expected a member (`name: type`) or `fn`, found integer `1`",
            Some("an `env` body holds members, such as `action: discrete(3)`, and `fn` items"),
        ),
        (
            "env E { a: f32[3] = 1 }",
            "expected a member (`name: type`) or `fn`, found `=`",
            Some("an `env` body holds members, such as `action: discrete(3)`, and `fn` items"),
        ),
        (
            "env E { a f32 }",
            "expected `:`, found identifier `f32`",
            Some("an `env` body holds members, such as `action: discrete(3)`, and `fn` items"),
        ),
        ("env E { a: discrete(3; }", "expected one of `)` or `,`, found `;`", None),
        ("env E { a: 1.5 }", "expected `(`, an identifier or an integer, found float `1.5`", None),
        (
            "env E { fn f() -> f32 { 1.0 } let (a, b) = (1, 2); }",
            "expected a member (`name: type`) or `fn`, found keyword `let`",
            Some(
                "`let` statements go inside functions; an `env` body holds members, such as \
                 `action: discrete(3)`, and `fn` items",
            ),
        ),
        ("env { a: f32 }", "expected an identifier, found `{`", None),
        ("env E { a: f32", "unexpected end of file, expected `}`, a member (`name: type`) or `fn`", None),
        (
            "env E { a: i32 x + 1 }",
            "expected `:`, found `+`",
            Some("an `env` body holds members, such as `action: discrete(3)`, and `fn` items"),
        ),
        ("fn f(x f32) -> f32 { x }", "expected `:`, found identifier `f32`", None),
    ];
    for (src, message, help) in cases {
        let (_, diags) = parse(0, src);
        let first = diags.first().map(|d| (d.message.as_str(), d.help.as_deref()));
        assert_eq!(first, Some((message, help)), "for `{src}`");
    }
}

/// The members and functions (by name) of each env in `src`, and the names of the other
/// items, after a parse that must report exactly `want` errors.
fn recovered(src: &str, want: &[&str]) -> Vec<String> {
    let (m, diags) = parse(0, src);
    let got: Vec<&str> = diags.iter().map(|d| d.code).collect();
    assert_eq!(got, want, "for `{src}`:\n{}", render(src, &diags));
    m.items
        .iter()
        .map(|item| match item {
            Item::Env(e) => {
                let members = e.members.iter().map(|m| m.name.name.as_str());
                let fns = e.fns.iter().map(|f| format!("fn {}", f.name.name));
                let parts: Vec<String> = members.map(String::from).chain(fns).collect();
                format!("env {} [{}]", e.name.name, parts.join(" "))
            }
            Item::Fn(f) => format!("fn {}", f.name.name),
            Item::Struct(s) => format!("struct {}", s.name.name),
            Item::Const(c) => format!("const {}", c.name.name),
            Item::Agent(a) => format!("agent {}", a.name.name),
        })
        .collect()
}

#[test]
fn env_recovery() {
    let cases: [(&str, &[&str], &[&str]); 12] = [
        // A `let` statement is reported and skipped.
        ("env E { a: f32 let x = 1; b: i32 fn f() -> f32 { 1.0 } }", &["E0001"], &["env E [a b fn f]"]),
        // A broken member skips to the next `fn`, or to the env's end.
        ("env E { a: f32[3 4], b: discrete(2), fn f() -> f32 { 1.0 } }", &["E0001"], &["env E [fn f]"]),
        ("env E { a: f32[3 4] b: discrete(2) fn f() -> f32 { 1.0 } }", &["E0001"], &["env E [fn f]"]),
        ("env E { a: discrete(2 b: i32 }", &["E0001"], &["env E []"]),
        // A broken function skips to the next `fn`, past any `}`, `,` or `;` in its body.
        (
            "env E { a: f32 fn f() -> f32 { if a { 1 + } else { f(2, 3); } } fn g() -> f32 { 1.0 } b: i32 }",
            &["E0001"],
            &["env E [a b fn g]"],
        ),
        ("env E { fn f() -> f32 { g(1 +, 2) } fn g() -> f32 { 1.0 } }", &["E0001"], &["env E [fn g]"]),
        ("env E { fn f( -> f32 { 1.0 } fn g() -> f32 { 1.0 } }", &["E0001"], &["env E [fn g]"]),
        // ... or to the env's own `}`.
        (
            "env E { a: i32 fn f() -> f32 { if a { 1 + } else { 2 } } }\nfn top() -> f32 { 1.0 }",
            &["E0001"],
            &["env E [a]", "fn top"],
        ),
        // Every broken function is reported, even when they follow one another.
        (
            "env E { fn f() -> f32 { 1 + } fn g() -> f32 { (2 } fn h() -> f32 { 3 } fn i() -> f32 { ] } }",
            &["E0001", "E0001", "E0001"],
            &["env E [fn h]"],
        ),
        ("env E { a: f32[3 4] fn f() -> f32 { 1 + } fn g() -> f32 { 1.0 } }", &["E0001", "E0001"], &["env E [fn g]"]),
        // An unclosed function body: the next `fn` reports it and is kept.
        (
            "env E { fn f() -> f32 { 1.0 fn g() -> f32 { 2.0 } }\nfn top() -> f32 { 1.0 }",
            &["E0001"],
            &["env E [fn g]", "fn top"],
        ),
        // An unclosed env swallows what follows, and the end of the file reports it.
        ("struct S {}\nenv E { a: f32\nfn top() -> f32 { 1.0 }", &["E0002"], &["struct S"]),
    ];
    for (src, codes, items) in cases {
        assert_eq!(recovered(src, codes), items, "for `{src}`");
    }
}

#[test]
fn unclosed_delimiters_are_labelled() {
    let (_, diags) = parse(0, "fn f() -> f32 {\n    g(1, [2, 3]\n");
    let [d] = diags.as_slice() else { panic!("expected one error, got {diags:?}") };
    assert_eq!(d.code, "E0002");
    let opened: Vec<u32> = d.secondary.iter().map(|(s, _)| s.start).collect();
    assert_eq!(opened, [14, 21], "the `{{` and the `(`");
}

#[test]
fn nesting_is_bounded() {
    let deep = format!("fn f() -> i32 {{ {}1{} }}", "(".repeat(100_000), ")".repeat(100_000));
    assert_eq!(codes(&deep), ["E0007"]);
    let long = format!("fn f() -> i32 {{ 1{} }}", " + 1".repeat(100_000));
    assert_eq!(codes(&long), ["E0007"]);
    let unclosed = format!("fn f() -> i32 {{ {}", "-(".repeat(1_000));
    assert_eq!(codes(&unclosed), ["E0007"]);
    // Realistic depth is fine, and so are long flat lists.
    let nested = format!("fn f() -> i32 {{ {}1{} }}", "(1 + ".repeat(60), ")".repeat(60));
    assert_eq!(codes(&nested), Vec::<&str>::new());
    let flat = format!("fn f() -> i32[3] {{ [{}] }}", "-1, ".repeat(100_000));
    assert_eq!(codes(&flat), Vec::<&str>::new());
}

/// The diagnostics for each fixture in `tests/ui/parse`, as a user sees them.
#[test]
fn parse_error_fixtures() {
    insta::glob!("../../tests/ui/parse", "*.pod", |path| {
        let src = std::fs::read_to_string(path).unwrap_or_default();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let mut map = SourceMap::default();
        let file = map.add(name, src.clone());
        let (_, diags) = parse(file, &src);
        assert!(!diags.is_empty(), "{} parses without errors", path.display());
        insta::assert_snapshot!(format!("----- SOURCE CODE\n{src}\n----- ERROR\n{}", render_plain(&map, &diags)));
    });
}

// ----- robustness

/// A valid program using every construct, for the sweeps below.
const PROGRAM: &str = r"
use std::nn::{Mlp, mlp};
use std::random::Key;
/* a /* nested */ comment */
const ROWS: i32 = 10;
const EPS: f32 = 1e-3;
struct State { x: f32, n: i32, v: f32[ROWS, 4], }
struct Params<H> { policy: Mlp<50, H, 3>, t: (f32, (i32, f32)) }
fn step<N>(s: State, p: Params<N>, key: Key, m: f32[N, 4]) -> (State, f32) {
    let (a, (b, _)) = (s.x * 2.0 ** -1, (s.n as f32, 0));
    let c: f32[4] = m[0, :] + m[1:3, 1:][0] - [1.0, 2.0, 3.0, 4.5,];
    let d = if a < b && !(b >= EPS) || s.n != 3 { { let z = a % 2.0; z } } else if a == b { -a } else { p.t.1.0 as f32 };
    let e = for i in 0..ROWS - 1 carry (acc, k) = (0.0, key) { (acc + m.sum() @ c, split(k).0) };
    (State { x: d, n: s.n + 1, v: s.v }, e.0 / ROWS as f32)
}
env Walk {
    observation: f32[ROWS, 4], action: discrete(3);
    time_limit: 0x1F4
    fn reset(key: Key) -> State { State { x: 0.0, n: 0xFF_FF, v: zeros([ROWS, 4]) } }
    fn step(s: State, a: i32, key: Key) -> Step<State> {
        let t = s.n >= 0x10;
        Step { state: s, reward: 1.0, terminated: t, truncated: false }
    }
    state: State
}
agent Walker for Walk {
    fn init(key: Key) -> f32 { 0.0 }
    fn update<T, MB>(l: f32, traj: Trajectory<T, MB * 4>, key: Key) -> (f32, Params<MB * 2>) { (l, zeros()) }
}
";

/// A deterministic xorshift generator, so that failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[test]
fn the_sweep_program_is_valid() {
    parse_ok(PROGRAM);
}

/// Cutting the program anywhere but at the end of an item must be reported, and cutting
/// it at the end of one must not.
#[test]
fn every_prefix_parses_without_panicking() {
    let full = parse_ok(PROGRAM);
    let mut ends: Vec<usize> = full.uses.iter().map(|u| u.span.end as usize).collect();
    ends.extend(full.items.iter().map(|item| match item {
        Item::Const(c) => c.span.end as usize,
        Item::Struct(s) => s.span.end as usize,
        Item::Fn(f) => f.span.end as usize,
        Item::Env(e) => e.span.end as usize,
        Item::Agent(a) => a.span.end as usize,
    }));
    for end in 0..=PROGRAM.len() {
        let prefix = &PROGRAM[..end];
        let (_, diags) = parse(0, prefix);
        render(prefix, &diags);
        let lexed = lex(0, prefix);
        let at_item_end = lexed.tokens.last().is_none_or(|&(_, _, e)| ends.contains(&e));
        let valid = lexed.diags.is_empty() && at_item_end;
        assert_eq!(diags.is_empty(), valid, "prefix {end}:\n{prefix}\n{}", render(prefix, &diags));
    }
}

/// Random byte edits never panic; edits that unbalance delimiters are always reported.
#[test]
fn mutations_parse_without_panicking() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let pieces: [&[u8]; 12] = [b"(", b")", b"{", b"}", b";", b"..", b"/*", b"\xE2\x82", b"\0", b"let", b"<", b"."];
    for _ in 0..300 {
        let mut bytes = PROGRAM.as_bytes().to_vec();
        for _ in 0..=rng.below(3) {
            let at = rng.below(bytes.len());
            match rng.below(4) {
                0 => {
                    bytes.remove(at);
                }
                1 => bytes.insert(at, (rng.next() & 0xFF) as u8),
                2 => {
                    let piece = pieces[rng.below(pieces.len())];
                    bytes.splice(at..at, piece.iter().copied());
                }
                _ => {
                    let other = rng.below(bytes.len());
                    bytes.swap(at, other);
                }
            }
        }
        let src = String::from_utf8_lossy(&bytes);
        let (m, diags) = parse(0, &src);
        render(&src, &diags);
        print_module(&m);
    }
    // The comment is the only place where an extra opener would be harmless.
    let comment_end = PROGRAM.find("comment */").map_or(0, |i| i + "comment */".len());
    for _ in 0..200 {
        let at = comment_end + rng.below(PROGRAM.len() - comment_end);
        let opener = ["(", "[", "{"][rng.below(3)];
        let src = format!("{}{opener}{}", &PROGRAM[..at], &PROGRAM[at..]);
        assert!(!parse(0, &src).1.is_empty(), "no error after inserting `{opener}` at {at}");
    }
}
