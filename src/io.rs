//! Values in and out of `podc run`/`eval`: `--args` JSON into host arrays, results into
//! the `--json` object or a readable line.

use crate::array::{Array, ArrayTy, DType, Data};
use crate::types::Ty;
use serde_json::{Value, json};

/// Reads `--args`: a JSON array with one element per parameter. Arrays are (nested)
/// lists of numbers or bools, tuples are lists, structs are objects with every field.
pub fn args_from_json(params: &[Ty], v: &Value) -> Result<Vec<Array>, String> {
    let Value::Array(items) = v else {
        return Err("`--args` must be a JSON array with one element per parameter".into());
    };
    if items.len() != params.len() {
        return Err(format!("the entry takes {} arguments, but `--args` has {}", params.len(), items.len()));
    }
    let mut out = vec![];
    for (i, (t, x)) in params.iter().zip(items).enumerate() {
        read(t, x, &format!("argument {}", i + 1), &mut out)?;
    }
    Ok(out)
}

fn read(t: &Ty, v: &Value, at: &str, out: &mut Vec<Array>) -> Result<(), String> {
    match t {
        Ty::Array(..) => {
            let leaves = t.leaves().ok_or_else(|| format!("{at}: type `{t}` has unknown sizes"))?;
            out.push(read_array(&leaves[0], v, at)?);
        }
        Ty::Tuple(ts) => {
            let Value::Array(xs) = v else { return Err(format!("{at}: expected a list for `{t}`")) };
            if xs.len() != ts.len() {
                return Err(format!("{at}: expected {} elements for `{t}`, found {}", ts.len(), xs.len()));
            }
            for (k, (t, x)) in ts.iter().zip(xs).enumerate() {
                read(t, x, &format!("{at}.{k}"), out)?;
            }
        }
        Ty::Struct(def, args) => {
            let Value::Object(m) = v else { return Err(format!("{at}: expected an object for `{t}`")) };
            if let Some(k) = m.keys().find(|k| !def.fields.iter().any(|(n, _)| n == *k)) {
                return Err(format!("{at}: `{t}` has no field `{k}`"));
            }
            for (n, ft) in Ty::struct_fields(def, args) {
                let x = m.get(&n).ok_or_else(|| format!("{at}: missing field `{n}` of `{t}`"))?;
                read(&ft, x, &format!("{at}.{n}"), out)?;
            }
        }
        Ty::Error => return Err(format!("{at}: ill-typed parameter")),
    }
    Ok(())
}

/// Reads one array of type `ty` (`--set NAME=VALUE`).
pub fn read_value(ty: &ArrayTy, v: &Value) -> Result<Array, String> {
    read_array(ty, v, "the value")
}

fn read_array(ty: &ArrayTy, v: &Value, at: &str) -> Result<Array, String> {
    let mut flat = vec![];
    flatten(v, &ty.shape, at, &mut flat)?;
    let bad = |x: &Value| format!("{at}: `{x}` is not a valid `{}`", ty.dtype);
    let data = match ty.dtype {
        DType::F32 => Data::F32(
            flat.iter().map(|x| x.as_f64().map(|f| f as f32).ok_or_else(|| bad(x))).collect::<Result<_, _>>()?,
        ),
        DType::I32 => Data::I32(
            flat.iter()
                .map(|x| x.as_i64().and_then(|n| i32::try_from(n).ok()).ok_or_else(|| bad(x)))
                .collect::<Result<_, _>>()?,
        ),
        DType::U32 => Data::U32(
            flat.iter()
                .map(|x| x.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(|| bad(x)))
                .collect::<Result<_, _>>()?,
        ),
        DType::U8 => Data::U8(
            flat.iter()
                .map(|x| x.as_u64().and_then(|n| u8::try_from(n).ok()).ok_or_else(|| bad(x)))
                .collect::<Result<_, _>>()?,
        ),
        DType::Bool => Data::Bool(flat.iter().map(|x| x.as_bool().ok_or_else(|| bad(x))).collect::<Result<_, _>>()?),
    };
    Ok(Array::new(ty.shape.clone(), data))
}

fn flatten<'v>(v: &'v Value, shape: &[usize], at: &str, out: &mut Vec<&'v Value>) -> Result<(), String> {
    match shape.split_first() {
        None => {
            out.push(v);
            Ok(())
        }
        Some((&n, rest)) => {
            let Value::Array(xs) = v else { return Err(format!("{at}: expected a list of {n} elements, found `{v}`")) };
            if xs.len() != n {
                return Err(format!("{at}: expected a list of {n} elements, found {}", xs.len()));
            }
            xs.iter().try_for_each(|x| flatten(x, rest, at, out))
        }
    }
}

/// Overrides some fields of a struct value, given as its flattened leaves, with the
/// fields of a JSON object (`podc sim --state`); nested structs may be given in part too.
pub fn override_fields(t: &Ty, leaves: &mut [Array], v: &Value) -> Result<(), String> {
    let Ty::Struct(def, args) = t else { return Err(format!("the state is `{t}`, not a struct")) };
    let Value::Object(m) = v else { return Err("`--state` must be a JSON object of state fields".into()) };
    if let Some(k) = m.keys().find(|k| !def.fields.iter().any(|(n, _)| n == *k)) {
        let names: Vec<&str> = def.fields.iter().map(|(n, _)| n.as_str()).collect();
        return Err(format!("the state `{t}` has no field `{k}` (its fields: {})", names.join(", ")));
    }
    let mut at = 0;
    for (n, ft) in Ty::struct_fields(def, args) {
        let count = ft.leaves().map_or(0, |l| l.len());
        if let Some(x) = m.get(&n) {
            let part = &mut leaves[at..at + count];
            if matches!(ft, Ty::Struct(..)) {
                override_fields(&ft, part, x)?;
            } else {
                let mut out = vec![];
                read(&ft, x, &format!("`--state` field `{n}`"), &mut out)?;
                part.clone_from_slice(&out);
            }
        }
        at += count;
    }
    Ok(())
}

/// An array as (nested) JSON lists, a scalar as a plain value.
pub fn nested_json(a: &Array) -> Value {
    let flat = data_json(&a.data);
    let Value::Array(items) = flat else { return flat };
    nest_json(&items, &a.shape)
}

fn nest_json(items: &[Value], shape: &[usize]) -> Value {
    match shape.split_first() {
        None => items.first().cloned().unwrap_or(Value::Null),
        Some((&n, rest)) => {
            let step = rest.iter().product::<usize>();
            Value::Array((0..n).map(|i| nest_json(&items[i * step..(i + 1) * step], rest)).collect())
        }
    }
}

/// The `--json` result: `{"entry": …, "outputs": [{"dtype", "shape", "data"}, …]}`,
/// with tuples and structs flattened in order and `data` row-major.
pub fn outputs_json(entry: &str, outs: &[Array]) -> Value {
    let outputs: Vec<Value> = outs
        .iter()
        .map(|a| json!({ "dtype": a.dtype().name(), "shape": a.shape, "data": data_json(&a.data) }))
        .collect();
    json!({ "entry": entry, "outputs": outputs })
}

fn data_json(d: &Data) -> Value {
    match d {
        // The shortest decimal that reads back as the same f32 (`0.8004990`, not the f64
        // expansion `0.800499022…`). Non-finite floats have no JSON number: strings.
        Data::F32(v) => v
            .iter()
            .map(|&x| match x.to_string().parse::<f64>() {
                Ok(d) if x.is_finite() => json!(d),
                _ => json!(x.to_string()),
            })
            .collect(),
        Data::I32(v) => json!(v),
        Data::U32(v) => json!(v),
        Data::U8(v) => json!(v),
        Data::Bool(v) => json!(v),
    }
}

/// A readable rendering of a result of type `t`: `(45, 57.66504)`, `[1, 2]`,
/// `Dense { w: [[…]], b: […] }`.
pub fn show(t: &Ty, outs: &[Array]) -> String {
    let mut it = outs.iter();
    show_at(t, &mut it)
}

fn show_at<'a>(t: &Ty, it: &mut impl Iterator<Item = &'a Array>) -> String {
    match t {
        Ty::Array(..) => it.next().map(show_array).unwrap_or_default(),
        Ty::Tuple(ts) => format!("({})", ts.iter().map(|t| show_at(t, it)).collect::<Vec<_>>().join(", ")),
        Ty::Struct(def, args) => {
            let fields: Vec<String> =
                Ty::struct_fields(def, args).iter().map(|(n, t)| format!("{n}: {}", show_at(t, it))).collect();
            format!("{} {{ {} }}", def.name, fields.join(", "))
        }
        Ty::Error => String::new(),
    }
}

fn show_array(a: &Array) -> String {
    let items: Vec<String> = match &a.data {
        Data::F32(v) => v.iter().map(|x| format!("{x:?}")).collect(),
        Data::I32(v) => v.iter().map(|x| x.to_string()).collect(),
        Data::U32(v) => v.iter().map(|x| x.to_string()).collect(),
        Data::U8(v) => v.iter().map(|x| x.to_string()).collect(),
        Data::Bool(v) => v.iter().map(|x| x.to_string()).collect(),
    };
    nest(&items, &a.shape)
}

fn nest(items: &[String], shape: &[usize]) -> String {
    match shape.split_first() {
        None => items.first().cloned().unwrap_or_default(),
        Some((&n, rest)) => {
            let step = rest.iter().product::<usize>();
            let parts: Vec<String> = (0..n).map(|i| nest(&items[i * step..(i + 1) * step], rest)).collect();
            format!("[{}]", parts.join(", "))
        }
    }
}

/// `key(seed)`, as `jax.random.key_data(jax.random.key(seed))` gives it for a 64-bit seed.
pub fn seed_key(seed: i64) -> Array {
    Array::new(vec![2], crate::array::Data::U32(vec![(seed >> 32) as u32, seed as u32]))
}
