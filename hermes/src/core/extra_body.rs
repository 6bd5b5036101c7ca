//! What a decompose request may carry beyond its own fields (`extra_body` in the config): a
//! pure rule, so that the config reader refuses such a field and the client drops it by the
//! same words.

use serde_json::Value;

/// Why `extra_body` may not set request field `name` to `value`, if it may not: the one rule for
/// what a decompose request may carry beyond its own fields. A decompose call is one ordinary
/// completion: nothing may change what it is (`model`, `messages`), turn it into an agent's turn
/// (tools), stream it, or make the provider bill more than that one completion (several
/// choices or candidates, a web search, audio output, a dearer service tier). The configuration
/// refuses such a field with this reason; the client drops it too, so no caller gets it past.
pub fn refused_body_field(name: &str, value: &Value) -> Option<String> {
    let one = Value::from(1);
    match name {
        "model" => Some("not allowed: set auxiliary.kanban_decomposer.model instead".to_owned()),
        "messages" => Some("not allowed: the decomposer writes the prompt".to_owned()),
        "tools" | "tool_choice" | "functions" | "function_call" | "parallel_tool_calls" => Some(
            "not allowed: a decompose call never offers tools (providers and recorders tell aux \
             calls from agent turns by their absence)"
                .to_owned(),
        ),
        "stream_options" => Some(
            "not allowed: whether the reply streams is the client's choice (it reads both)"
                .to_owned(),
        ),
        "stream" if value != &Value::Bool(false) => Some(format!(
            "only false is allowed (the client asks for a plain reply and reads a stream \
             anyway), got {value}"
        )),
        // Each extra choice, or candidate, is billed as completion tokens of its own.
        "n" | "best_of" if value != &one => Some(format!(
            "only 1 is allowed (each extra choice is billed and none would be read), got {value}"
        )),
        "web_search_options" => {
            Some("not allowed: a web search is billed on top of the completion".to_owned())
        }
        "plugins" if mentions_web_plugin(value) => Some(
            "not allowed: the web plugin's search is billed on top of the completion".to_owned(),
        ),
        "modalities" if value != &serde_json::json!(["text"]) => Some(format!(
            "only [text] is allowed (audio output is billed at audio rates), got {value}"
        )),
        "audio" => Some("not allowed: audio output is billed at audio rates".to_owned()),
        "service_tier" if !matches!(value.as_str(), Some("auto" | "default" | "flex")) => {
            Some(format!(
                "only auto, default or flex is allowed (another tier bills each token at a \
                 higher rate), got {value}"
            ))
        }
        _ => None,
    }
}

/// Whether an OpenRouter-style `plugins` list names the web search plugin.
fn mentions_web_plugin(value: &Value) -> bool {
    let Some(plugins) = value.as_array() else {
        // Not a list: nothing the provider could read as a plugin, but nothing to check either.
        return !value.is_null();
    };
    plugins
        .iter()
        .any(|plugin| plugin.get("id").and_then(Value::as_str) == Some("web"))
}
