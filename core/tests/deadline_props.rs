//! quickcheck properties of the deadline headers, against a reference parser written from
//! the formats' definitions (gRPC's PROTOCOL-HTTP2 grammar; a decimal integer of ms),
//! not from the code under test:
//!
//! - no sequence of bytes makes a parser panic, and every result is a budget within the
//!   one-hour cap or one of the three reasons, exactly as the reference says;
//! - `parse(format(x))` gives back `x` rounded down to the unit the formatter chose
//!   (less than one unit lost, never more time than `x`);
//! - a larger number in the same unit never parses to a smaller budget.

use quickcheck::{quickcheck, Arbitrary, Gen, TestResult};
use surgeguard_core::deadline::{
    deadline_at, format_budget, format_deadline, parse_grpc_timeout, parse_header, parse_millis,
    remaining, Budgets, FormatError, HeaderError, HeaderFormat, HeaderValue, MAX_BUDGET,
    MAX_FORMATTED_LEN,
};
use surgeguard_core::time::MAX_NOW;

const MS: u128 = 1_000_000;
const CAP: u128 = 3_600 * 1_000_000_000;

/// The reference: what the header's definition says the value means, computed in u128
/// arithmetic on the decoded text (no saturation tricks).
fn reference(format: HeaderFormat, value: &[u8]) -> Result<u64, HeaderError> {
    let Ok(text) = std::str::from_utf8(value) else {
        return Err(HeaderError::Malformed);
    };
    let text = text.trim_matches(|c| c == ' ' || c == '\t');
    let (negative, body) = match text.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, text),
    };
    let (number, per_unit) = match format {
        HeaderFormat::Millis => (body, MS),
        _ => {
            let Some(unit) = body.chars().last() else {
                return Err(HeaderError::Malformed);
            };
            let per = match unit {
                'H' => 3_600_000_000_000,
                'M' => 60_000_000_000,
                'S' => 1_000_000_000,
                'm' => 1_000_000,
                'u' => 1_000,
                'n' => 1,
                _ => return Err(HeaderError::Malformed),
            };
            let number = &body[..body.len() - 1];
            if number.len() > 8 {
                return Err(HeaderError::Malformed);
            }
            (number, per)
        }
    };
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HeaderError::Malformed);
    }
    if negative {
        return Err(HeaderError::Negative);
    }
    // Leading zeros carry no value; a long number is over the cap in any unit.
    let significant = number.trim_start_matches('0');
    if significant.len() > 30 {
        return Err(HeaderError::TooLarge);
    }
    let n: u128 = if significant.is_empty() { 0 } else { significant.parse().unwrap() };
    let ns = n * per_unit;
    if ns > CAP {
        Err(HeaderError::TooLarge)
    } else {
        Ok(ns as u64)
    }
}

/// Header values near the grammar: digits, units, signs, spaces and stray bytes.
#[derive(Clone, Debug)]
struct Value(Vec<u8>);

impl Arbitrary for Value {
    fn arbitrary(g: &mut Gen) -> Self {
        const ALPHABET: &[u8] = b"0123456789012345678901234567890123456789HMSmun -+. \t\xffx";
        let len = usize::arbitrary(g) % 14;
        let mut v: Vec<u8> = (0..len).map(|_| *g.choose(ALPHABET).unwrap()).collect();
        if bool::arbitrary(g) {
            // Often a well-formed number, so every outcome is reached.
            // 1 to 10 digits (8 is gRPC's limit), leading zeros included.
            let digits = 1 + usize::arbitrary(g) % 10;
            v = (0..digits).map(|_| b'0' + u8::arbitrary(g) % 10).collect();
            if bool::arbitrary(g) {
                v.push(*g.choose(b"HMSmun").unwrap());
            }
            if u8::arbitrary(g) % 8 == 0 {
                v.insert(0, b'-');
            }
        }
        Value(v)
    }

    fn shrink(&self) -> Box<dyn Iterator<Item = Self>> {
        Box::new(self.0.shrink().map(Value))
    }
}

quickcheck! {
    fn grpc_parsing_matches_the_grammar(v: Value) -> bool {
        parse_grpc_timeout(&v.0) == reference(HeaderFormat::GrpcTimeout, &v.0)
    }

    fn millis_parsing_matches_the_definition(v: Value) -> bool {
        parse_millis(&v.0) == reference(HeaderFormat::Millis, &v.0)
    }

    fn any_bytes_parse_to_a_capped_budget_or_a_reason(bytes: Vec<u8>, name: Vec<u8>) -> bool {
        let ok = |r: Result<u64, HeaderError>| r.map_or(true, |b| b <= MAX_BUDGET);
        ok(parse_grpc_timeout(&bytes))
            && ok(parse_millis(&bytes))
            && ok(parse_header(&name, &bytes))
            && parse_grpc_timeout(&bytes) == reference(HeaderFormat::GrpcTimeout, &bytes)
            && parse_millis(&bytes) == reference(HeaderFormat::Millis, &bytes)
    }

    fn format_then_parse_rounds_down_by_less_than_a_unit(x: u64, grpc: bool) -> TestResult {
        let x = x % (MAX_BUDGET + 1);
        let format = if grpc { HeaderFormat::GrpcTimeout } else { HeaderFormat::Millis };
        let mut buf = [0u8; MAX_FORMATTED_LEN];
        let n = match format_budget(format, x, &mut buf) {
            Ok(n) => n,
            // Zero in the format's unit: the only refusal, and only below one unit.
            Err(e) => {
                let unit = if grpc { 1 } else { MS as u64 };
                return TestResult::from_bool(e == FormatError::Exhausted && x < unit);
            }
        };
        let text = &buf[..n];
        let back = match format {
            HeaderFormat::GrpcTimeout => parse_grpc_timeout(text),
            _ => parse_millis(text),
        };
        let Ok(back) = back else { return TestResult::failed() };
        let unit = if grpc {
            // The finest unit whose value fits in 8 digits.
            [1u64, 1_000, 1_000_000, 1_000_000_000, 60_000_000_000, 3_600_000_000_000]
                .into_iter()
                .find(|u| x / u <= 99_999_999)
                .unwrap()
        } else {
            MS as u64
        };
        TestResult::from_bool(back <= x && x - back < unit && text.len() <= MAX_FORMATTED_LEN)
    }

    fn a_larger_number_is_never_a_smaller_budget(a: u32, b: u32, unit: u8, grpc: bool) -> bool {
        let (a, b) = if grpc { (a % 100_000_000, b % 100_000_000) } else { (a, b) };
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let u = if grpc { [b'H', b'M', b'S', b'm', b'u', b'n'][unit as usize % 6] as char } else { ' ' };
        let text = |n: u32| if grpc { format!("{n}{u}") } else { format!("{n}") };
        let p = |n: u32| {
            if grpc { parse_grpc_timeout(text(n).as_bytes()) } else { parse_millis(text(n).as_bytes()) }
        };
        match (p(lo), p(hi)) {
            (Ok(x), Ok(y)) => x <= y,
            // Once over the cap, a larger number stays over it.
            (Err(HeaderError::TooLarge), r) => r == Err(HeaderError::TooLarge),
            (Ok(_), Err(e)) => e == HeaderError::TooLarge,
            _ => false,
        }
    }

    fn budgets_keep_the_smallest_valid_one(values: Vec<(bool, Value)>) -> bool {
        let mut b = Budgets::new();
        let mut expected: Option<u64> = None;
        for (grpc, v) in &values {
            let format = if *grpc { HeaderFormat::GrpcTimeout } else { HeaderFormat::Millis };
            let r = reference(format, &v.0);
            if let Ok(x) = r {
                expected = Some(expected.map_or(x, |m| m.min(x)));
            }
            let name: &[u8] = if *grpc { b"grpc-timeout" } else { b"surgeguard-timeout-ms" };
            if b.add(parse_header(name, &v.0)) != r.err() {
                return false;
            }
        }
        b.budget() == expected
    }

    fn outgoing_never_exceeds_what_remains(deadline: u64, now: u64, margin: u64, grpc: bool) -> bool {
        let format = if grpc { HeaderFormat::GrpcTimeout } else { HeaderFormat::Millis };
        let mut buf = [0u8; MAX_FORMATTED_LEN];
        let r = format_deadline(format, deadline, now, margin, &mut buf);
        if now > MAX_NOW {
            return r == Err(FormatError::TimeOutOfRange);
        }
        if deadline > MAX_NOW {
            return r == Err(FormatError::NoDeadline);
        }
        let left = u128::from(deadline) - u128::from(now).min(u128::from(deadline));
        let left = left.saturating_sub(u128::from(margin));
        match r {
            Ok(n) => {
                let back = parse_header(if grpc { b"grpc-timeout" } else { b"x" }, &buf[..n]).unwrap();
                u128::from(back) <= left && back <= MAX_BUDGET && back > 0
                    && HeaderValue::of_deadline(format, deadline, now, margin).unwrap().as_bytes()
                        == &buf[..n]
            }
            Err(FormatError::Exhausted) => left < if grpc { 1 } else { MS },
            Err(_) => false,
        }
    }

    fn deadlines_are_arrival_plus_budget_below_max_now(now: u64, budget: u64) -> bool {
        match deadline_at(now, budget) {
            Ok(d) => now <= MAX_NOW && u128::from(d) == (u128::from(now) + u128::from(budget)).min(u128::from(MAX_NOW)),
            Err(_) => now > MAX_NOW,
        }
    }

    fn remaining_is_bounded(deadline: u64, now: u64, margin: u64) -> bool {
        match remaining(deadline, now, margin) {
            Ok(r) => r > 0 && r <= MAX_BUDGET && u128::from(r) + u128::from(now) + u128::from(margin) <= u128::from(deadline),
            Err(_) => true,
        }
    }
}
