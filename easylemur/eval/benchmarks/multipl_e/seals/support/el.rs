// easylemur's seal for MultiPL-E's Rust (seals/rs.py): the values that cross from a sealed
// program's driver (untrusted: it holds the candidate's code) to its judge (trusted: MultiPL-E's
// tests), one per call of the function under test, typed by the function's declared return type.
//
// The driver records each call's value (`record`) and writes them all to the file `values` at
// its end (`flush`); the judge's stub returns the next one (`next`), parsed, never executed, and
// the judge's last statement (`done`) checks that every value was used before it prints the end
// marker. Anything malformed, short or of the wrong shape ends the judge with status 3: a
// failure, never a pass. Any value the judge accepts is one the function could have returned.
//
// Format: tokens, each followed by one space. An integer (bool: 0 or 1; char: its code point) in
// decimal; f32 and f64 as the unsigned decimal of their bits (exact: -0.0, NaN and infinities
// too); a String as "<bytes>:<UTF-8 bytes>"; a Vec, HashMap, BTreeMap, HashSet or BTreeSet as
// its length, then its elements (a map's as key, value); an Option as 0, or 1 and its value; a
// tuple as its elements. Rust 1.63 (Debian's rustc): no OnceLock, no let-else.
//
// The crate `easylemur_seal`: built once as an rlib outside the sandbox (seals/rs.py), or, where
// that cannot be, pasted into each program as `mod easylemur_seal { ... }`.
#![allow(dead_code)]

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::Hash;
use std::io::Write;

pub fn bad(why: &str) -> ! {
    eprintln!("\neasylemur: the program's values cannot be used: {}", why);
    std::process::exit(3)
}

pub struct Input {
    data: Vec<u8>,
    at: usize,
}

thread_local! {
    static OUT: RefCell<Vec<u8>> = RefCell::new(Vec::new());
    static IN: RefCell<Option<Input>> = RefCell::new(None);
}

/// One type that can cross: `put` appends to the driver's values, `get` parses the judge's.
pub trait Seal: Sized {
    fn put(&self, out: &mut Vec<u8>);
    fn get(input: &mut Input) -> Self;
}

// ------------------------------------------------------------ the driver's side

pub fn record<T: Seal>(value: &T) {
    OUT.with(|o| value.put(&mut o.borrow_mut()));
}

/// The driver's last statement: the values file, then the program's end marker.
pub fn flush(marker: &str) {
    let written = OUT.with(|o| std::fs::write("values", &*o.borrow()));
    if written.is_err() {
        eprintln!("\neasylemur: cannot write the values file");
        std::process::exit(3);
    }
    println!("\n{}", marker);
    let _ = std::io::stdout().flush();
}

fn word(out: &mut Vec<u8>, w: &str) {
    out.extend_from_slice(w.as_bytes());
    out.push(b' ');
}

// ------------------------------------------------------------ the judge's side

fn with_input<R>(f: impl FnOnce(&mut Input) -> R) -> R {
    IN.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            match std::fs::read("values") {
                Ok(data) => *slot = Some(Input { data, at: 0 }),
                Err(_) => bad("no values file"),
            }
        }
        f(slot.as_mut().unwrap())
    })
}

pub fn next<T: Seal>() -> T {
    with_input(|i| T::get(i))
}

/// The judge's last statement: every value was used; then the end marker.
pub fn done(marker: &str) {
    if with_input(|i| i.at != i.data.len()) {
        bad("more values than calls");
    }
    println!("\n{}", marker);
    let _ = std::io::stdout().flush();
}

impl Input {
    /// The digits of one token up to `stop` (consumed): (negative, magnitude).
    fn digits(&mut self, sign: bool, stop: u8) -> (bool, u128) {
        let mut negative = false;
        if sign && self.at < self.data.len() && self.data[self.at] == b'-' {
            negative = true;
            self.at += 1;
        }
        let start = self.at;
        let mut v: u128 = 0;
        while self.at < self.data.len() && self.data[self.at].is_ascii_digit() {
            if self.at - start >= 39 {
                bad("a number out of range");
            }
            v = match v.checked_mul(10).and_then(|x| x.checked_add((self.data[self.at] - b'0') as u128)) {
                Some(x) => x,
                None => bad("a number out of range"),
            };
            self.at += 1;
        }
        if self.at == start || (self.at - start > 1 && self.data[start] == b'0') || (negative && v == 0) {
            bad("a malformed number");
        }
        if self.at >= self.data.len() || self.data[self.at] != stop {
            bad("a malformed separator");
        }
        self.at += 1;
        (negative, v)
    }

    fn unsigned(&mut self, most: u128) -> u128 {
        let (_, v) = self.digits(false, b' ');
        if v > most {
            bad("a number out of range");
        }
        v
    }

    fn signed(&mut self, least: i128, most: i128) -> i128 {
        let (negative, m) = self.digits(true, b' ');
        if m > i128::MAX as u128 {
            bad("a number out of range");
        }
        let v = if negative { -(m as i128) } else { m as i128 };
        if v < least || v > most {
            bad("a number out of range");
        }
        v
    }

    /// A length: every element takes two bytes at least, so a larger one is a lie, not an allocation.
    fn count(&mut self) -> usize {
        let n = self.unsigned(u64::MAX as u128);
        if n > ((self.data.len() - self.at) / 2 + 1) as u128 {
            bad("a length beyond the values left");
        }
        n as usize
    }
}

// ------------------------------------------------------------ the types

impl Seal for bool {
    fn put(&self, out: &mut Vec<u8>) {
        word(out, if *self { "1" } else { "0" });
    }
    fn get(input: &mut Input) -> Self {
        input.unsigned(1) == 1
    }
}

macro_rules! integers {
    ($($t:ty),*) => {$(
        impl Seal for $t {
            fn put(&self, out: &mut Vec<u8>) {
                word(out, &self.to_string());
            }
            fn get(input: &mut Input) -> Self {
                if <$t>::MIN == 0 {
                    input.unsigned(<$t>::MAX as u128) as $t
                } else {
                    input.signed(<$t>::MIN as i128, <$t>::MAX as i128) as $t
                }
            }
        }
    )*};
}
integers!(i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, usize);

impl Seal for u128 {
    fn put(&self, out: &mut Vec<u8>) {
        word(out, &self.to_string());
    }
    fn get(input: &mut Input) -> Self {
        input.unsigned(u128::MAX)
    }
}

impl Seal for f64 {
    fn put(&self, out: &mut Vec<u8>) {
        word(out, &self.to_bits().to_string());
    }
    fn get(input: &mut Input) -> Self {
        f64::from_bits(input.unsigned(u64::MAX as u128) as u64)
    }
}

impl Seal for f32 {
    fn put(&self, out: &mut Vec<u8>) {
        word(out, &self.to_bits().to_string());
    }
    fn get(input: &mut Input) -> Self {
        f32::from_bits(input.unsigned(u32::MAX as u128) as u32)
    }
}

impl Seal for char {
    fn put(&self, out: &mut Vec<u8>) {
        word(out, &(*self as u32).to_string());
    }
    fn get(input: &mut Input) -> Self {
        match char::from_u32(input.unsigned(u32::MAX as u128) as u32) {
            Some(c) => c,
            None => bad("a char that is no code point"),
        }
    }
}

impl Seal for String {
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.len().to_string().as_bytes());
        out.push(b':');
        out.extend_from_slice(self.as_bytes());
        out.push(b' ');
    }
    fn get(input: &mut Input) -> Self {
        let (_, n) = input.digits(false, b':');
        if n >= (input.data.len() - input.at) as u128 {
            bad("a string beyond the values left");
        }
        let end = input.at + n as usize;
        let s = match String::from_utf8(input.data[input.at..end].to_vec()) {
            Ok(s) => s,
            Err(_) => bad("a string that is not UTF-8"),
        };
        if input.data[end] != b' ' {
            bad("a malformed separator");
        }
        input.at = end + 1;
        s
    }
}

impl<T: Seal> Seal for Vec<T> {
    fn put(&self, out: &mut Vec<u8>) {
        word(out, &self.len().to_string());
        for x in self {
            x.put(out);
        }
    }
    fn get(input: &mut Input) -> Self {
        let n = input.count();
        (0..n).map(|_| T::get(input)).collect()
    }
}

impl<T: Seal> Seal for Option<T> {
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            None => word(out, "0"),
            Some(x) => {
                word(out, "1");
                x.put(out);
            }
        }
    }
    fn get(input: &mut Input) -> Self {
        if input.unsigned(1) == 0 {
            None
        } else {
            Some(T::get(input))
        }
    }
}

macro_rules! maps {
    ($($map:ident: $($bound:path),+);*) => {$(
        impl<K: Seal $(+ $bound)+, V: Seal> Seal for $map<K, V> {
            fn put(&self, out: &mut Vec<u8>) {
                word(out, &self.len().to_string());
                for (k, v) in self {
                    k.put(out);
                    v.put(out);
                }
            }
            fn get(input: &mut Input) -> Self {
                let n = input.count();
                let mut m = $map::new();
                for _ in 0..n {
                    let k = K::get(input);
                    let v = V::get(input);
                    if m.insert(k, v).is_some() {
                        bad("a key twice");
                    }
                }
                m
            }
        }
    )*};
}
maps!(HashMap: Eq, Hash; BTreeMap: Ord);

macro_rules! sets {
    ($($set:ident: $($bound:path),+);*) => {$(
        impl<K: Seal $(+ $bound)+> Seal for $set<K> {
            fn put(&self, out: &mut Vec<u8>) {
                word(out, &self.len().to_string());
                for k in self {
                    k.put(out);
                }
            }
            fn get(input: &mut Input) -> Self {
                let n = input.count();
                let mut s = $set::new();
                for _ in 0..n {
                    if !s.insert(K::get(input)) {
                        bad("an element twice");
                    }
                }
                s
            }
        }
    )*};
}
sets!(HashSet: Eq, Hash; BTreeSet: Ord);

impl Seal for () {
    fn put(&self, _: &mut Vec<u8>) {}
    fn get(_: &mut Input) -> Self {}
}

macro_rules! tuples {
    ($(($($t:ident $i:tt),+)),*) => {$(
        impl<$($t: Seal),+> Seal for ($($t,)+) {
            fn put(&self, out: &mut Vec<u8>) {
                $(self.$i.put(out);)+
            }
            fn get(input: &mut Input) -> Self {
                // a tuple's fields are evaluated left to right
                ($($t::get(input),)+)
            }
        }
    )*};
}
tuples!((A 0), (A 0, B 1), (A 0, B 1, C 2), (A 0, B 1, C 2, D 3), (A 0, B 1, C 2, D 3, E 4),
        (A 0, B 1, C 2, D 3, E 4, F 5), (A 0, B 1, C 2, D 3, E 4, F 5, G 6),
        (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7));
