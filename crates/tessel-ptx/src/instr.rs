//! A small PTX instruction builder with typed operands (after Triton's `PTXAsmFormat.h`):
//! an opcode, its `.suffix` modifiers, an optional `@p` guard and a list of [`Arg`]s. All
//! instruction text of the crate is produced by the `Display` impls here, so spelling and
//! spacing live in one place.

use std::borrow::Cow;
use std::fmt;

/// A PTX register class: the declared type and the name prefix of its registers.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub(crate) enum RegClass {
    /// `.pred %p<n>`.
    Pred,
    /// `.b16 %h<n>`: scratch for the f16 half of `F16ToF32`; not an IR register type.
    B16,
    /// `.b32 %r<n>`: the IR's `U32`.
    B32,
    /// `.b64 %rd<n>`: the IR's `U64`.
    B64,
    /// `.f32 %f<n>`.
    F32,
}

impl RegClass {
    /// Every class, in the order the declarations are printed.
    pub(crate) const ALL: [RegClass; 5] = [
        RegClass::Pred,
        RegClass::B16,
        RegClass::B32,
        RegClass::B64,
        RegClass::F32,
    ];

    pub(crate) fn prefix(self) -> &'static str {
        match self {
            RegClass::Pred => "p",
            RegClass::B16 => "h",
            RegClass::B32 => "r",
            RegClass::B64 => "rd",
            RegClass::F32 => "f",
        }
    }

    pub(crate) fn decl_type(self) -> &'static str {
        match self {
            RegClass::Pred => "pred",
            RegClass::B16 => "b16",
            RegClass::B32 => "b32",
            RegClass::B64 => "b64",
            RegClass::F32 => "f32",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// A printed register, `%<prefix><n>`.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub(crate) struct RegName {
    pub(crate) class: RegClass,
    pub(crate) n: u32,
}

impl fmt::Display for RegName {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "%{}{}", self.class.prefix(), self.n)
    }
}

/// A label, `$L__<structure><n>_<part>`: named after the structure it closes (`for`, `if`)
/// and numbered per kernel in emission order.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub(crate) struct Label {
    pub(crate) structure: &'static str,
    pub(crate) n: u32,
    pub(crate) part: &'static str,
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "$L__{}{}_{}", self.structure, self.n, self.part)
    }
}

/// An instruction operand.
#[derive(Clone, PartialEq, Debug)]
pub(crate) enum Arg {
    Reg(RegName),
    /// An unsigned 32- or 64-bit immediate, printed in decimal.
    Uint(u64),
    /// A signed immediate (operands of `.s32` instructions), printed in decimal.
    Sint(i64),
    /// A 32-bit mask or constant printed in hex (`0x1f`, `0xffffffff`).
    Hex(u32),
    /// An f32 immediate as its bits, printed `0fXXXXXXXX` so that every value (`-0.0`, NaN
    /// payloads, denormals) is exact.
    F32Bits(u32),
    /// A special register, `%tid.x`.
    Special(&'static str),
    /// A variable name: a shared buffer's address in `mov.u32 %r, smem0`.
    Symbol(String),
    /// A memory operand `[base+offset]`, where `base` is a register or a `.param` name.
    Addr(Box<Arg>, i32),
    /// A vector of registers, `{%f0, %f1}`.
    Vector(Vec<RegName>),
    /// A tensor operand of `cp.async.bulk.tensor`: the tensor map's address and the
    /// coordinates (registers or immediates), `[%rd1, {%r2, 0}]`.
    TensorRef(Box<Arg>, Vec<Arg>),
    Label(Label),
}

impl From<RegName> for Arg {
    fn from(r: RegName) -> Self {
        Arg::Reg(r)
    }
}

impl From<Label> for Arg {
    fn from(l: Label) -> Self {
        Arg::Label(l)
    }
}

impl fmt::Display for Arg {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Arg::Reg(r) => r.fmt(f),
            Arg::Uint(v) => write!(f, "{v}"),
            Arg::Sint(v) => write!(f, "{v}"),
            Arg::Hex(v) => write!(f, "{v:#x}"),
            Arg::F32Bits(bits) => write!(f, "0f{bits:08X}"),
            Arg::Special(s) => f.write_str(s),
            Arg::Symbol(s) => f.write_str(s),
            Arg::Addr(base, 0) => write!(f, "[{base}]"),
            // PTX spells a negative offset `[%rd1+-8]`.
            Arg::Addr(base, off) => write!(f, "[{base}+{off}]"),
            Arg::Vector(regs) => {
                f.write_str("{")?;
                for (i, r) in regs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    r.fmt(f)?;
                }
                f.write_str("}")
            }
            Arg::Label(l) => l.fmt(f),
            Arg::TensorRef(map, coords) => {
                write!(f, "[{map}, {{")?;
                for (i, c) in coords.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    c.fmt(f)?;
                }
                f.write_str("}]")
            }
        }
    }
}

/// One PTX instruction: `[@[!]p] opcode.mod.mod args;`.
#[derive(Clone, PartialEq, Debug)]
pub(crate) struct Instr {
    guard: Option<(RegName, bool)>,
    opcode: &'static str,
    mods: Vec<Cow<'static, str>>,
    args: Vec<Arg>,
}

impl Instr {
    pub(crate) fn new(opcode: &'static str) -> Instr {
        Instr {
            guard: None,
            opcode,
            mods: Vec::new(),
            args: Vec::new(),
        }
    }

    /// Appends modifiers (`.rn`, `.f32`, ...), given without the dot.
    pub(crate) fn m(mut self, mods: &[&'static str]) -> Instr {
        self.mods.extend(mods.iter().map(|&m| Cow::Borrowed(m)));
        self
    }

    /// Appends one modifier made at run time (`m64n128k16`).
    pub(crate) fn m_owned(mut self, m: String) -> Instr {
        self.mods.push(Cow::Owned(m));
        self
    }

    /// Appends an operand.
    pub(crate) fn arg(mut self, a: impl Into<Arg>) -> Instr {
        self.args.push(a.into());
        self
    }

    /// Appends operands.
    pub(crate) fn args(mut self, args: impl IntoIterator<Item = Arg>) -> Instr {
        self.args.extend(args);
        self
    }

    /// Executes only where `p` is true (`@p`), or false when `negated` (`@!p`).
    pub(crate) fn guard(mut self, p: RegName, negated: bool) -> Instr {
        self.guard = Some((p, negated));
        self
    }
}

impl fmt::Display for Instr {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        if let Some((p, negated)) = self.guard {
            write!(f, "@{}{p} ", if negated { "!" } else { "" })?;
        }
        f.write_str(self.opcode)?;
        for m in &self.mods {
            write!(f, ".{m}")?;
        }
        for (i, a) in self.args.iter().enumerate() {
            f.write_str(if i == 0 { " " } else { ", " })?;
            a.fmt(f)?;
        }
        f.write_str(";")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spelling() {
        let f = |n| RegName {
            class: RegClass::F32,
            n,
        };
        let p = RegName {
            class: RegClass::Pred,
            n: 2,
        };
        let rd = RegName {
            class: RegClass::B64,
            n: 1,
        };
        let add = Instr::new("add")
            .m(&["rn", "f32"])
            .arg(f(0))
            .arg(f(1))
            .arg(Arg::F32Bits((-0.0f32).to_bits()));
        assert_eq!(add.to_string(), "add.rn.f32 %f0, %f1, 0f80000000;");
        let bra = Instr::new("bra").arg(Label {
            structure: "for",
            n: 0,
            part: "end",
        });
        assert_eq!(bra.guard(p, true).to_string(), "@!%p2 bra $L__for0_end;");
        let ld = Instr::new("ld")
            .m(&["global", "v2", "b32"])
            .arg(Arg::Vector(vec![f(0), f(1)]))
            .arg(Arg::Addr(Box::new(rd.into()), -8));
        assert_eq!(ld.to_string(), "ld.global.v2.b32 {%f0, %f1}, [%rd1+-8];");
        assert_eq!(Arg::Hex(0x1f).to_string(), "0x1f");
        assert_eq!(Arg::Sint(-1).to_string(), "-1");
        assert_eq!(
            Instr::new("bar").m(&["sync"]).arg(Arg::Uint(0)).to_string(),
            "bar.sync 0;"
        );
    }
}
