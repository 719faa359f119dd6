//! Typed knobs: a kernel family declares its knobs once, as a struct.
//!
//! [`knob_set!`] turns one declaration into
//! - the struct, one typed field per knob, which kernel builders read instead of strings;
//! - the knob space: the axes the tuner walks and the values it also accepts ([`KnobSpace`]);
//! - the default record;
//! - the conversions from and to the `NAME=VALUE` records ([`Knobs`]) that the CLI, the results files and
//!   k3k-build keep using.
//!
//! A field's `absent` value is the migration of records written before the knob existed: reading such a record
//! gives the meaning it had then (a field without one is required). The record itself is not rewritten: kernel
//! names and tuning keys are made from the record as it was given, so an old record keeps naming the same
//! kernel.
//!
//! Field types implement [`KnobType`]: `u32` (integer knobs), enums declared with [`knob_enum!`] (one word or
//! number per variant), and `Option<T>` (a knob whose absence means something no value says). Adding a knob to
//! a family is one field of its declaration plus the code that reads the field.
//!
//! ```ignore
//! knob_enum! {
//!     /// Tile order inside a group.
//!     pub enum Raster: str { M = "m", N = "n" }
//! }
//! knob_set! {
//!     /// The knobs of one kernel family.
//!     pub struct TileKnobs for "my_op" {
//!         /// Rows per block tile.
//!         bm: u32 = "BM" => { axis: "rows per block tile" [64, 128], default: 128, },
//!         /// Tile order (records written before the knob existed: along m).
//!         raster: Raster = "RASTER" => { axis: "tile order" [Raster::M, Raster::N], absent: Raster::M, },
//!     }
//! }
//! ```

pub use k3k_ir::{KnobError, KnobSpace, KnobValue, Knobs};

use crate::OpError;

/// A type a knob's value is read as.
pub trait KnobType: Sized {
    /// Read the value of knob `name`, present in record `k` of operator `op`.
    fn read(op: &'static str, k: &Knobs, name: &str) -> Result<Self, OpError>;
    /// The value a record holds for `self` (`None`: the knob is left out).
    fn value(&self) -> Option<KnobValue>;
}

impl KnobType for u32 {
    fn read(_op: &'static str, k: &Knobs, name: &str) -> Result<Self, OpError> {
        Ok(k.u32(name)?)
    }
    fn value(&self) -> Option<KnobValue> {
        Some(KnobValue::from(*self))
    }
}

impl<T: KnobType> KnobType for Option<T> {
    fn read(op: &'static str, k: &Knobs, name: &str) -> Result<Self, OpError> {
        T::read(op, k, name).map(Some)
    }
    fn value(&self) -> Option<KnobValue> {
        self.as_ref().and_then(T::value)
    }
}

/// The value a record holds for a declared value (declarations only write values that a record can hold).
pub fn value_of<T: KnobType>(v: T) -> KnobValue {
    v.value().expect("a declared knob value is written to records")
}

/// `a`, `a or b`, `a, b or c`: the words of an error message.
pub fn one_of(words: &[String]) -> String {
    match words {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// An enum whose variants are the values of a knob: `str` words or `u32` numbers. A value outside the enum is
/// `OpError::InvalidKnobs` naming the knob and the values in declaration order (`STORE must be reg or tma, got
/// x`); a value of the other kind is the record's [`k3k_ir::KnobError`].
macro_rules! knob_enum {
    (@value str, $word:literal) => {
        $crate::typed_knobs::KnobValue::from($word)
    };
    (@value u32, $word:literal) => {
        $crate::typed_knobs::KnobValue::Int($word as i64)
    };
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident : $kind:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $word:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl $crate::typed_knobs::KnobType for $name {
            fn read(
                op: &'static str,
                k: &$crate::typed_knobs::Knobs,
                name: &str,
            ) -> Result<Self, $crate::OpError> {
                let v = k.$kind(name)?;
                $( if v == $word { return Ok($name::$variant); } )+
                let words = [$( $word.to_string() ),+];
                Err($crate::OpError::InvalidKnobs {
                    op,
                    knobs: k.to_string(),
                    why: format!("{name} must be {}, got {v}", $crate::typed_knobs::one_of(&words)),
                })
            }
            fn value(&self) -> Option<$crate::typed_knobs::KnobValue> {
                Some(match self {
                    $( $name::$variant => $crate::typed_knobs::knob_enum!(@value $kind, $word) ),+
                })
            }
        }
    };
}
pub(crate) use knob_enum;

/// A kernel family's knobs, declared once (see the module doc). Each field is
/// `name: Type = "KNOB" => { axis: "doc" [values], accepts: "doc" [values], default: v, absent: v, }`, every
/// clause optional and in this order: `axis` is a dimension of the tuning space, `accepts` values the builder
/// takes beyond it (checked, never walked by the tuner; repeated, one entry each, where groups of values have
/// their own docs), `default` the value in the default record (a field without one is left out of it), `absent`
/// the meaning of a record without the knob (without one the knob is required; `absent: None` on an `Option<T>`
/// field where the absence means something no value says, or differs by kernel path). Axes and accepted values
/// keep the declaration's order.
macro_rules! knob_set {
    (@absent $knob:expr) => {
        return Err($crate::OpError::Knob($crate::typed_knobs::KnobError::Missing { name: ($knob).to_string() }))
    };
    (@absent $knob:expr, $absent:expr) => {
        $absent
    };
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident for $op:literal {
            $(
                $(#[$fmeta:meta])*
                $field:ident : $ty:ty = $knob:expr => {
                    $( axis: $adoc:literal [ $($aval:expr),* $(,)? ] , )?
                    $( accepts: $cdoc:literal [ $($cval:expr),* $(,)? ] , )*
                    $( default: $default:expr , )?
                    $( absent: $absent:expr , )?
                }
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl $name {
            /// The operator whose records these are (named in errors).
            pub const OP: &'static str = $op;
            /// The knob names, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$($knob),*];

            /// The tuning space (axes) and the values the builder also accepts, in declaration order.
            pub fn space() -> $crate::typed_knobs::KnobSpace {
                let s = $crate::typed_knobs::KnobSpace::default();
                $(
                    $( let s = s.axis($knob, $adoc, {
                        let vals: Vec<$ty> = vec![$($aval),*];
                        vals.into_iter().map($crate::typed_knobs::value_of).collect::<Vec<_>>()
                    }); )?
                    $( let s = s.accepts($knob, $cdoc, {
                        let vals: Vec<$ty> = vec![$($cval),*];
                        vals.into_iter().map($crate::typed_knobs::value_of).collect::<Vec<_>>()
                    }); )*
                )*
                s
            }

            /// The record used when no tuning record exists: every field declared with a default.
            pub fn defaults() -> $crate::typed_knobs::Knobs {
                let k = $crate::typed_knobs::Knobs::new();
                $( $( let k = k.with($knob, $crate::typed_knobs::value_of::<$ty>($default)); )? )*
                k
            }

            /// Read a record: absent knobs take their `absent` meaning (the migration of older records), a
            /// required one is `KnobError::Missing`, a value of the wrong kind or outside an enum an error naming
            /// the knob.
            pub fn from_knobs(k: &$crate::typed_knobs::Knobs) -> Result<Self, $crate::OpError> {
                Ok($name {
                    $( $field: match k.0.get($knob) {
                        Some(_) => <$ty as $crate::typed_knobs::KnobType>::read($op, k, $knob)?,
                        None => $crate::typed_knobs::knob_set!(@absent $knob $(, $absent)?),
                    }, )*
                })
            }

            /// The record of every field (fields of `None` left out): the migrated form of a record read by
            /// [`Self::from_knobs`].
            pub fn to_knobs(self) -> $crate::typed_knobs::Knobs {
                let mut k = $crate::typed_knobs::Knobs::new();
                $( if let Some(v) = $crate::typed_knobs::KnobType::value(&self.$field) { k.set($knob, v); } )*
                k
            }
        }
    };
}
pub(crate) use knob_set;

/// `true` / `false` knobs (the record's [`KnobValue::Bool`]; any other kind is the record's [`KnobError`]).
impl KnobType for bool {
    fn read(_op: &'static str, k: &Knobs, name: &str) -> Result<Self, OpError> {
        Ok(k.bool(name)?)
    }
    fn value(&self) -> Option<KnobValue> {
        Some(KnobValue::from(*self))
    }
}

/// A knob that is `auto` (the kernel family's own rule picks the value) or a number, e.g. `AHEAD`, `L2PF`. A word
/// other than `auto` is `OpError::InvalidKnobs` naming the knob; the number's range is the reader's to check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AutoOr {
    Auto,
    Value(u32),
}

impl AutoOr {
    /// The number, or `None` for `auto`.
    pub fn number(self) -> Option<u32> {
        match self {
            AutoOr::Auto => None,
            AutoOr::Value(v) => Some(v),
        }
    }
}

impl KnobType for AutoOr {
    fn read(op: &'static str, k: &Knobs, name: &str) -> Result<Self, OpError> {
        match k.0.get(name) {
            Some(KnobValue::Str(s)) if s == "auto" => Ok(AutoOr::Auto),
            Some(KnobValue::Str(s)) => Err(OpError::InvalidKnobs {
                op,
                knobs: k.to_string(),
                why: format!("{name} must be auto or a number, got {s}"),
            }),
            _ => u32::read(op, k, name).map(AutoOr::Value),
        }
    }
    fn value(&self) -> Option<KnobValue> {
        Some(match self {
            AutoOr::Auto => KnobValue::from("auto"),
            AutoOr::Value(v) => KnobValue::from(*v),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    knob_enum! {
        /// A toy enum.
        enum Order: str { Rows = "rows", Cols = "cols" }
    }

    knob_set! {
        /// A toy family.
        struct Toy for "toy" {
            /// Required, tuned.
            tile: u32 = "TILE" => { axis: "tile" [16, 32], default: 32, },
            /// Accepted only, with a legacy meaning.
            order: Order = "ORDER" => { accepts: "order" [Order::Rows, Order::Cols], absent: Order::Rows, },
            /// Absent means something no value says; two groups of accepted values.
            depth: Option<u32> = "DEPTH" => { accepts: "shallow" [Some(1)], accepts: "deep" [Some(8)], absent: None, },
        }
    }

    #[test]
    fn one_declaration_gives_space_defaults_and_reads() {
        let s = Toy::space();
        assert_eq!(s.size(), 2);
        assert_eq!(s.accepted[0].values, vec![KnobValue::from("rows"), KnobValue::from("cols")]);
        let depth: Vec<(&str, &str)> = s.accepted[1..].iter().map(|a| (a.name.as_str(), a.doc.as_str())).collect();
        assert_eq!(depth, [("DEPTH", "shallow"), ("DEPTH", "deep")]);
        assert_eq!(s.accepted[2].values, vec![KnobValue::from(8u32)]);
        assert_eq!(Toy::defaults(), Knobs::new().with("TILE", 32u32));
        let t = Toy::from_knobs(&Toy::defaults()).unwrap();
        assert_eq!((t.tile, t.order, t.depth), (32, Order::Rows, None));
        let t = Toy::from_knobs(&Knobs::new().with("TILE", 16u32).with("ORDER", "cols").with("DEPTH", 3u32)).unwrap();
        assert_eq!((t.tile, t.order, t.depth), (16, Order::Cols, Some(3)));
        assert_eq!(Toy::from_knobs(&t.to_knobs()).unwrap(), t);
        assert_eq!((Toy::OP, Toy::NAMES), ("toy", &["TILE", "ORDER", "DEPTH"][..]));
        let e = Toy::from_knobs(&Knobs::new().with("TILE", 16u32).with("ORDER", "diag")).unwrap_err();
        assert_eq!(e.to_string(), "toy: knobs ORDER=diag,TILE=16 are not valid: ORDER must be rows or cols, got diag");
        assert!(matches!(Toy::from_knobs(&Knobs::new()), Err(OpError::Knob(KnobError::Missing { .. }))));
    }

    #[test]
    fn words_are_listed_as_a_sentence() {
        let w = |v: &[&str]| one_of(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(w(&["a"]), "a");
        assert_eq!(w(&["a", "b"]), "a or b");
        assert_eq!(w(&["a", "b", "c"]), "a, b or c");
    }
}
