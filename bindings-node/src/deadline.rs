//! Deadline headers (`surgeguard_core::deadline`): parse the caller's budget, make the
//! arrival deadline, format the outgoing value. Budgets cross as milliseconds (JS
//! numbers), deadlines and `nowNs` as BigInt nanoseconds on the binding's clock. The
//! middlewares and the fetch wrapper that use them live in the JS facade.

use napi::bindgen_prelude::*;
use napi_derive::napi;
use surgeguard_core::deadline::{self, Budgets, FormatError, HeaderValue};
use surgeguard_core::time::MAX_NOW;

use crate::clock::resolve_now;
use crate::convert::{ms_to_ns, ns_to_ms, range};

/// The largest budget a header may carry, ms (one hour).
#[napi(js_name = "DEADLINE_MAX_BUDGET_MS")]
pub const DEADLINE_MAX_BUDGET_MS: f64 = (deadline::MAX_BUDGET / 1_000_000) as f64;

/// The deadline headers read by default: `grpc-timeout`, Envoy's, the project's own.
#[napi(js_name = "deadlineHeaders")]
pub fn deadline_headers() -> Vec<&'static str> {
    vec![
        deadline::GRPC_TIMEOUT,
        deadline::ENVOY_EXPECTED_RQ_TIMEOUT_MS,
        deadline::SURGEGUARD_TIMEOUT_MS,
    ]
}

/// One header's budget (ms) or the reason it was ignored.
#[napi(object)]
pub struct ParsedDeadline {
    pub budget_ms: Either<f64, Null>,
    pub ignored: Either<String, Null>,
}

/// Several headers: the smallest valid budget (ms), and `[name, reason]` per ignored one.
#[napi(object)]
pub struct ParsedDeadlines {
    pub budget_ms: Either<f64, Null>,
    pub ignored: Vec<Vec<String>>,
}

fn value_bytes(value: &Either<String, Buffer>) -> &[u8] {
    match value {
        Either::A(s) => s.as_bytes(),
        Either::B(b) => b.as_ref(),
    }
}

/// `{ budgetMs, ignored: null }` if `name: value` is a valid deadline header, else
/// `{ budgetMs: null, ignored: reason }`. The value is read as a comma-separated list (a
/// header sent twice, its lines joined by Node's http): the core's `parse_header` takes
/// its smallest valid item, or the first item's reason when none is valid.
#[napi(js_name = "parseDeadlineHeader")]
pub fn parse_deadline_header(name: String, value: Either<String, Buffer>) -> ParsedDeadline {
    match deadline::parse_header(name.as_bytes(), value_bytes(&value)) {
        Ok(b) => ParsedDeadline { budget_ms: Either::A(ns_to_ms(b)), ignored: Either::B(Null) },
        Err(e) => {
            ParsedDeadline { budget_ms: Either::B(Null), ignored: Either::A(e.as_str().into()) }
        }
    }
}

/// The smallest valid budget among `[name, value]` pairs (each value a list, as above).
#[napi(js_name = "parseDeadlineHeaders")]
pub fn parse_deadline_headers(headers: Vec<(String, Either<String, Buffer>)>) -> ParsedDeadlines {
    let mut budgets = Budgets::new();
    let mut ignored = Vec::new();
    for (name, value) in &headers {
        if let Some(e) = budgets.add(deadline::parse_header(name.as_bytes(), value_bytes(value))) {
            ignored.push(vec![name.clone(), e.as_str().into()]);
        }
    }
    let budget_ms = match budgets.budget() {
        Some(b) => Either::A(ns_to_ms(b)),
        None => Either::B(Null),
    };
    ParsedDeadlines { budget_ms, ignored }
}

/// `now + budgetMs` as BigInt nanoseconds, saturating at 2^62.
#[napi(js_name = "deadlineAt")]
pub fn deadline_at(budget_ms: f64, now_ns: Option<BigInt>) -> Result<BigInt> {
    let budget = ms_to_ns("budgetMs", budget_ms)?;
    let now = resolve_now(now_ns)?;
    let d =
        deadline::deadline_at(now, budget).map_err(|_| range("nowNs", "must be in [0, 2^62]"))?;
    Ok(BigInt::from(d))
}

/// The outgoing value of header `name` for `deadlineNs − now − marginMs`, rounded down;
/// `null` when exhausted (fail fast: send nothing).
#[napi(js_name = "formatDeadlineHeader")]
pub fn format_deadline_header(
    name: String,
    deadline_ns: BigInt,
    margin_ms: Option<f64>,
    now_ns: Option<BigInt>,
) -> Result<Option<String>> {
    let (signed, deadline, lossless) = deadline_ns.get_u64();
    if signed || !lossless || deadline > MAX_NOW {
        return Err(range("deadlineNs", "must be a BigInt in [0, 2^62]"));
    }
    let margin = match margin_ms {
        Some(m) => ms_to_ns("marginMs", m)?,
        None => 0,
    };
    let now = resolve_now(now_ns)?;
    let format = deadline::HeaderFormat::for_name(name.as_bytes());
    match HeaderValue::of_deadline(format, deadline, now, margin) {
        Ok(v) => Ok(Some(v.as_str().to_owned())),
        Err(FormatError::Exhausted) => Ok(None),
        Err(e) => Err(range("deadlineNs", &e.to_string())),
    }
}
