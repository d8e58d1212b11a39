//! The JSONPath subset printer columns use: `.a.b`, `[n]`, `[*]`, `['key']`, `[?(@.f=="v")]`.

use serde_json::Value;

/// A JSONPath subset: `.a.b`, `[n]`, `[*]`, `['key']`, `[?(@.f=="v")]`.
pub fn json_path<'a>(obj: &'a Value, path: &str) -> Vec<&'a Value> {
    let path = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('$');
    let mut cur: Vec<&Value> = vec![obj];
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let field = &r[..end];
            rest = &r[end..];
            if field.is_empty() {
                continue;
            }
            cur = cur.into_iter().filter_map(|v| v.get(field)).collect();
        } else if let Some(r) = rest.strip_prefix('[') {
            let Some(end) = r.find(']') else {
                return Vec::new();
            };
            let inner = &r[..end];
            rest = &r[end + 1..];
            if inner == "*" {
                cur = cur
                    .into_iter()
                    .flat_map(|v| match v {
                        Value::Array(a) => a.iter().collect::<Vec<_>>(),
                        Value::Object(m) => m.values().collect(),
                        _ => Vec::new(),
                    })
                    .collect();
            } else if let Ok(i) = inner.parse::<usize>() {
                cur = cur.into_iter().filter_map(|v| v.get(i)).collect();
            } else if let Some(filter) =
                inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')'))
            {
                let (field, want) = match filter.split_once("==") {
                    Some((f, w)) => (
                        f.trim(),
                        Some(w.trim().trim_matches(|c| c == '"' || c == '\'')),
                    ),
                    None => (filter.trim(), None),
                };
                cur = cur
                    .into_iter()
                    .filter_map(Value::as_array)
                    .flatten()
                    .filter(|item| {
                        let got = field
                            .split('.')
                            .try_fold(*item, |acc, p| acc.get(p))
                            .map(|v| match v {
                                Value::String(s) => s.clone(),
                                other => other.to_string(),
                            });
                        match (got, want) {
                            (Some(g), Some(w)) => g == w,
                            (Some(_), None) => true,
                            (None, _) => false,
                        }
                    })
                    .collect();
            } else {
                let key = inner.trim_matches(|c| c == '\'' || c == '"');
                cur = cur.into_iter().filter_map(|v| v.get(key)).collect();
            }
        } else {
            return Vec::new();
        }
    }
    cur
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn json_path_subset() {
        let o = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "X", "status": "False"}]}, "spec": {"n": 3}});
        assert_eq!(json_path(&o, ".spec.n"), vec![&json!(3)]);
        assert_eq!(
            json_path(&o, ".status.conditions[?(@.type==\"Ready\")].status"),
            vec![&json!("True")]
        );
        assert_eq!(
            json_path(&o, ".status.conditions[1].type"),
            vec![&json!("X")]
        );
    }
}
