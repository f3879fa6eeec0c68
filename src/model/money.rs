//! An amount of money, in cents: what a cost command reports per member and
//! what `[policy] max_monthly_increase` caps. Figures arrive as decimal
//! strings (Infracost writes `"123.4567"`); they are kept exactly to the cent,
//! rounded half away from zero, so the digest that binds them never depends
//! on how a float prints.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Money {
    cents: i64,
}

impl Money {
    pub const ZERO: Money = Money { cents: 0 };

    pub fn from_cents(cents: i64) -> Self {
        Money { cents }
    }

    pub fn cents(self) -> i64 {
        self.cents
    }

    pub fn saturating_add(self, other: Money) -> Money {
        Money::from_cents(self.cents.saturating_add(other.cents))
    }

    pub fn saturating_sub(self, other: Money) -> Money {
        Money::from_cents(self.cents.saturating_sub(other.cents))
    }

    /// With its sign always written (`+780.00`, `-3.50`, `+0.00`): a difference.
    pub fn signed(self) -> String {
        if self.cents < 0 {
            self.to_string()
        } else {
            format!("+{self}")
        }
    }
}

impl std::iter::Sum for Money {
    fn sum<I: Iterator<Item = Money>>(iter: I) -> Money {
        iter.fold(Money::ZERO, Money::saturating_add)
    }
}

impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.cents < 0 { "-" } else { "" };
        let abs = self.cents.unsigned_abs();
        write!(f, "{sign}{}.{:02}", abs / 100, abs % 100)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an amount: write a decimal number such as `120` or `120.50`")]
pub struct NotAnAmount(pub String);

impl FromStr for Money {
    type Err = NotAnAmount;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || NotAnAmount(text.to_owned());
        let (negative, digits) = match text.trim().strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text.trim().strip_prefix('+').unwrap_or(text.trim())),
        };
        let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
        let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() && fraction.is_empty()
            || !all_digits(whole)
            || !all_digits(fraction)
            || (digits.contains('.') && fraction.is_empty())
        {
            return Err(bad());
        }
        let whole: i64 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| bad())?
        };
        let digit = |i: usize| i64::from(fraction.as_bytes().get(i).map_or(0, |b| b - b'0'));
        let mut cents = digit(0) * 10 + digit(1);
        if digit(2) >= 5 {
            cents += 1;
        }
        let cents = whole
            .checked_mul(100)
            .and_then(|c| c.checked_add(cents))
            .ok_or_else(bad)?;
        Ok(Money::from_cents(if negative { -cents } else { cents }))
    }
}

impl Serialize for Money {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Read from a string (`"120.50"`, as Infracost and the records write it)
/// or a number (`120.5`, as a hand-written config may); `null` is zero
/// (Infracost writes it for a project it could not price).
impl<'de> Deserialize<'de> for Money {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Money;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an amount, such as \"120.50\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Money, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Money, E> {
                v.to_string().parse().map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Money, E> {
                v.to_string().parse().map_err(E::custom)
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Money, E> {
                if !v.is_finite() {
                    return Err(E::custom(format!("{v} is not an amount")));
                }
                format!("{v:.6}").parse().map_err(E::custom)
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Money, E> {
                Ok(Money::ZERO)
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<Money, E> {
                Ok(Money::ZERO)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_read_to_the_cent_and_written_back_alike() {
        for (text, cents, shown) in [
            ("120", 12000, "120.00"),
            ("120.5", 12050, "120.50"),
            ("0.004", 0, "0.00"),
            ("0.005", 1, "0.01"),
            ("123.4567", 12346, "123.46"),
            ("-3.5", -350, "-3.50"),
            (".25", 25, "0.25"),
            ("+7", 700, "7.00"),
        ] {
            let money: Money = text.parse().unwrap();
            assert_eq!(money.cents(), cents, "{text}");
            assert_eq!(money.to_string(), shown, "{text}");
        }
        assert_eq!(Money::from_cents(78000).signed(), "+780.00");
        assert_eq!(Money::from_cents(-1).signed(), "-0.01");
        for bad in ["", "1.", "1,5", "abc", "1e3", "--1", "99999999999999999999"] {
            let e = bad.parse::<Money>().unwrap_err();
            assert!(e.to_string().contains("is not an amount"), "{bad}: {e}");
        }
    }

    #[test]
    fn strings_numbers_and_null_all_read() {
        let read = |json: &str| serde_json::from_str::<Money>(json).map(Money::cents);
        assert_eq!(read(r#""19.99""#).unwrap(), 1999);
        assert_eq!(read("500").unwrap(), 50000);
        assert_eq!(read("12.345").unwrap(), 1235);
        assert_eq!(read("null").unwrap(), 0);
        assert!(read(r#""twelve""#).is_err());
        assert_eq!(
            serde_json::to_string(&Money::from_cents(1999)).unwrap(),
            r#""19.99""#
        );
    }
}
