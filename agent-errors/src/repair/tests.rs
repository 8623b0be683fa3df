use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

/// The schema of a tool with one parameter of each kind the repairs care about.
fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "max_results": {"type": "integer"},
            "exact": {"type": "boolean"},
            "note": {"type": ["string", "null"]},
            "filter": {"$ref": "#/$defs/Filter"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["city", "max_results"],
        "$defs": {
            "Filter": {
                "type": "object",
                "properties": {"min_stars": {"type": "integer"}},
                "required": ["min_stars"],
            }
        }
    })
}

/// How much work a text of `len` bytes may take: a constant per byte, whatever the text.
fn bound(len: usize) -> usize {
    16 * len + 64
}

fn repaired(raw: &str) -> Repaired {
    repair_arguments(raw, &schema()).unwrap_or_else(|e| panic!("{raw}: {e}"))
}

#[test]
fn each_repair_alone() {
    let cases: [(&str, Change); 6] = [
        (
            "Here you go:\n```json\n{\"city\": \"Oslo\", \"max_results\": 3}\n```",
            Change::Extracted,
        ),
        (
            r#"{"city": "Oslo", "max_results": 3,}"#,
            Change::TrailingComma,
        ),
        (
            r#"{'city': 'Oslo', 'max_results': 3}"#,
            Change::SingleQuotes,
        ),
        (r#"{city: "Oslo", max_results: 3}"#, Change::UnquotedKey),
        (
            r#"{"city": "Oslo", "max_results": 3, "exact": True, "note": None}"#,
            Change::PythonLiteral,
        ),
        (
            r#"{"City": "Oslo", "max_results": 3}"#,
            Change::RenamedKey {
                from: "City".into(),
                to: "city".into(),
            },
        ),
    ];
    for (raw, change) in cases {
        let fixed = repaired(raw);
        assert_eq!(fixed.changes(), [change], "{raw}");
        assert_eq!(fixed.value()["city"], "Oslo");
        assert_eq!(fixed.value()["max_results"], 3);
        assert_eq!(
            serde_json::from_str::<Value>(fixed.arguments()).unwrap(),
            *fixed.value()
        );
    }
}

#[test]
fn quoted_numbers_and_booleans_are_read_as_the_schema_asks() {
    let fixed = repaired(r#"{"city": "Oslo", "max_results": "3", "exact": "true"}"#);
    assert_eq!(
        fixed.value(),
        &json!({"city": "Oslo", "max_results": 3, "exact": true})
    );
    assert_eq!(
        fixed.changes(),
        [
            Change::Unquoted {
                at: "/max_results".into()
            },
            Change::Unquoted {
                at: "/exact".into()
            },
        ]
    );
    // A string parameter keeps its digits; a nested integer is read too.
    let fixed = repaired(r#"{"city": "1905", "max_results": 3, "filter": {"min_stars": "4"}}"#);
    assert_eq!(fixed.value()["city"], "1905");
    assert_eq!(fixed.value()["filter"]["min_stars"], 4);
    // Nothing that would be a guess: a fraction for an integer, spaces, words, a sign of
    // something else.
    for sent in [
        "\"2.5\"",
        "\" 3\"",
        "\"three\"",
        "\"3 items\"",
        "\"\"",
        "\"0x10\"",
    ] {
        let raw = format!(r#"{{"city": "Oslo", "max_results": {sent}}}"#);
        let refused = repair_arguments(&raw, &schema()).unwrap_err();
        assert!(
            matches!(refused, NotRepaired::StillInvalid { .. }),
            "{raw}: {refused:?}"
        );
    }
    // A number schema takes a fraction.
    let schema = json!({"type": "object", "properties": {"ratio": {"type": "number"}}});
    let fixed = repair_arguments(r#"{"ratio": "2.5"}"#, &schema).unwrap();
    assert_eq!(fixed.value(), &json!({"ratio": 2.5}));
}

#[test]
fn an_object_sent_as_a_json_string_is_read_whole_and_per_parameter() {
    let whole = repaired(r#""{\"city\": \"Oslo\", \"max_results\": 3}""#);
    assert_eq!(whole.changes(), [Change::Decoded { at: String::new() }]);
    let inner = repaired(r#"{"city": "Oslo", "max_results": 3, "filter": "{\"minStars\": 4}"}"#);
    assert_eq!(inner.value()["filter"], json!({"min_stars": 4}));
    assert_eq!(
        inner.changes(),
        [
            Change::Decoded {
                at: "/filter".into()
            },
            Change::RenamedKey {
                from: "minStars".into(),
                to: "min_stars".into()
            },
        ]
    );
    // A string parameter holding JSON is the model's business: it stays a string.
    let kept = repaired(r#"{"city": "{\"a\": 1}", "max_results": "3"}"#);
    assert_eq!(kept.value()["city"], r#"{"a": 1}"#);
    assert_eq!(
        kept.changes(),
        [Change::Unquoted {
            at: "/max_results".into()
        }]
    );
}

#[test]
fn keys_are_renamed_only_when_the_match_is_unambiguous() {
    for name in ["maxResults", "MaxResults", "max-results", "MAX_RESULTS"] {
        let raw = format!(r#"{{"city": "Oslo", "{name}": 3}}"#);
        assert_eq!(repaired(&raw).value()["max_results"], 3, "{name}");
    }
    // Both the parameter and a near match: the near match is left alone (and fails the schema
    // only if the schema forbids unknown keys; this one allows them).
    let both = r#"{"city": "Oslo", "max_results": 3, "maxResults": 4}"#;
    assert_eq!(
        repair_arguments(both, &schema()).unwrap_err(),
        NotRepaired::AlreadyValid
    );
    // Two near matches of one parameter: neither is picked.
    let two = r#"{"city": "Oslo", "maxResults": 3, "MaxResults": 4}"#;
    assert!(matches!(
        repair_arguments(two, &schema()),
        Err(NotRepaired::StillInvalid { .. })
    ));
}

#[test]
fn refuses_what_it_would_have_to_guess() {
    let refused = |raw: &str| repair_arguments(raw, &schema()).unwrap_err();
    assert_eq!(
        refused(r#"{"city": "Oslo", "max_results": 3} or {"city": "Bergen", "max_results": 3}"#),
        NotRepaired::NoObject
    );
    assert_eq!(
        refused(r#"{"city": "Oslo", "city": "Bergen", "max_results": 3}"#),
        NotRepaired::DuplicateKey
    );
    assert_eq!(
        refused(r#"{city: 'Oslo', city: 'Bergen', max_results: 3}"#),
        NotRepaired::DuplicateKey
    );
    // A value the model left out is not invented.
    assert_eq!(
        refused("{city: 'Oslo'}"),
        NotRepaired::StillInvalid {
            paths: vec![String::new()]
        }
    );
    assert_eq!(refused("[1, 2]"), NotRepaired::NoObject);
    assert_eq!(
        repair_arguments("{}", &json!({"type": 7})).unwrap_err(),
        NotRepaired::BadSchema
    );
}

#[test]
fn hostile_texts_take_linear_work() {
    let n = MAX_REPAIR_INPUT;
    for text in [
        "{".repeat(n),
        "{a:".repeat(n / 3),
        "[".repeat(n),
        "'".repeat(n),
        "{\"".repeat(n / 2),
        "{'a': '".repeat(n / 7),
        format!("\"{}\"", "{".repeat(n - 2)),
        "{} ".repeat(n / 3),
    ] {
        let (result, steps) = repair_counted(&text, &schema());
        assert!(result.is_err());
        assert!(
            steps <= bound(text.len()),
            "{steps} steps for {} bytes",
            text.len()
        );
    }
}

#[test]
fn a_key_two_parameters_match_is_left_for_the_model() {
    // `userId` and `user_id` fold alike: `USERID` could mean either, so neither is chosen.
    let schema = json!({
        "type": "object",
        "properties": {"userId": {"type": "string"}, "user_id": {"type": "string"}},
        "additionalProperties": false,
    });
    assert_eq!(
        repair_arguments(r#"{"USERID": "u1",}"#, &schema).unwrap_err(),
        NotRepaired::StillInvalid {
            paths: vec![String::new()]
        }
    );
}

#[test]
fn broken_shapes_it_does_not_know_are_refused() {
    for raw in [
        r#"{"city": "Oslo", "max_results": 3"#, // never closed
        r#"{"city": "Oslo" // a comment
            , "max_results": 3}"#,
        r#"{"city": Oslo, "max_results": 3}"#, // a bare word for a value
        r#"{"city": "Oslo", "max_results": NaN}"#, // not a number JSON knows
        "}}}{{{",
        "```json\n```",
        r#"{"city": "Oslo", "max_results": 3]"#,
    ] {
        let refused = repair_arguments(raw, &schema());
        assert!(
            matches!(refused, Err(NotRepaired::NoObject)),
            "{raw}: {refused:?}"
        );
    }
}

#[test]
fn many_parameters_and_many_objects_still_take_linear_work() {
    // A key costs its length to match however many parameters the schema has.
    let properties: serde_json::Map<String, Value> = (0..2_000)
        .map(|n| (format!("param_{n}"), json!({"type": "integer"})))
        .collect();
    let schema = json!({
        "type": "object",
        "properties": {"rows": {"type": "array", "items": {
            "type": "object", "properties": properties, "additionalProperties": false,
        }}},
    });
    let row = "{Param1: 1, PARAM_2: 2},";
    let text = format!(
        "{{rows: [{}]}}",
        row.repeat(MAX_REPAIR_INPUT / row.len() - 1)
    );
    let (result, steps) = repair_counted(&text, &schema);
    let repaired = result.unwrap();
    assert_eq!(
        repaired.value()["rows"][0],
        json!({"param_1": 1, "param_2": 2})
    );
    assert!(
        steps <= bound(text.len()),
        "{steps} steps for {} bytes",
        text.len()
    );
}

/// A JSON value of a few levels, for texts the repairs must read back exactly.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(|n| json!(n)),
        "[a-zA-Z0-9 '\"\\\\\n{}:,]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z][a-z0-9_]{0,6}", inner, 0..4)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// Valid arguments of [`schema`], with extra keys of any value.
fn valid_arguments() -> impl Strategy<Value = Value> {
    (
        "[a-zA-Z ]{0,10}",
        any::<i64>(),
        proptest::option::of(any::<bool>()),
        prop::collection::btree_map("x_[a-z]{1,5}", json_value(), 0..3),
    )
        .prop_map(|(city, max, exact, extra)| {
            let mut object = json!({"city": city, "max_results": max});
            if let Some(exact) = exact {
                object["exact"] = json!(exact);
            }
            for (key, value) in extra {
                object[key] = value;
            }
            object
        })
}

/// `value` written as a model might: single quotes, bare keys, Python literals, a trailing
/// comma after every member.
fn sloppy(value: &Value) -> String {
    match value {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => {
            let double = serde_json::to_string(s).unwrap();
            let body = &double[1..double.len() - 1];
            format!("'{}'", body.replace("\\\"", "\"").replace('\'', "\\'"))
        }
        Value::Array(items) => {
            let items: String = items.iter().map(|v| format!("{}, ", sloppy(v))).collect();
            format!("[{items}]")
        }
        Value::Object(map) => {
            let members: String = map
                .iter()
                .map(|(k, v)| format!("{k}: {},\n", sloppy(v)))
                .collect();
            format!("{{{members}}}")
        }
    }
}

proptest! {
    #[test]
    fn never_panics_and_works_linearly_on_any_text(raw in "\\PC{0,400}") {
        let (_, steps) = repair_counted(&raw, &schema());
        prop_assert!(steps <= bound(raw.len()), "{} steps for {} bytes", steps, raw.len());
    }

    #[test]
    fn never_panics_and_works_linearly_on_almost_json(
        raw in "[{}\\[\\]'\":, a-zA-Z0-9_\\\\\n-]{0,400}"
    ) {
        let (_, steps) = repair_counted(&raw, &schema());
        prop_assert!(steps <= bound(raw.len()), "{} steps for {} bytes", steps, raw.len());
    }

    #[test]
    fn valid_arguments_are_never_changed(args in valid_arguments(), pretty in any::<bool>()) {
        let raw = if pretty {
            serde_json::to_string_pretty(&args).unwrap()
        } else {
            args.to_string()
        };
        prop_assert_eq!(repair_arguments(&raw, &schema()), Err(NotRepaired::AlreadyValid));
    }

    #[test]
    fn sloppy_arguments_read_back_exactly(args in valid_arguments(), fenced in any::<bool>()) {
        let raw = if fenced {
            format!("Calling it now:\n```json\n{}\n```", sloppy(&args))
        } else {
            sloppy(&args)
        };
        let (result, steps) = repair_counted(&raw, &schema());
        prop_assert!(steps <= bound(raw.len()));
        match result {
            Ok(fixed) => prop_assert_eq!(fixed.value(), &args),
            Err(refused) => prop_assert!(false, "{}: {}", raw, refused),
        }
    }
}
