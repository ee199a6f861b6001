// The Rust seal's codec, both ways (tests/test_multipl_e_seal_compiled.py): every type MultiPL-E's
// Rust prompts return, recorded, written, read back and compared exactly (floats bit for bit).
// Compiled with `--extern easylemur_seal` (seals/support/el.rs); trusted code, no candidate's.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
fn same<T: easylemur_seal::Seal + PartialEq + std::fmt::Debug>(want: T) {
    let got: T = easylemur_seal::next();
    assert_eq!(want, got);
}
fn same_bits(want: f64) {
    let got: f64 = easylemur_seal::next();
    assert_eq!(want.to_bits(), got.to_bits());
}
macro_rules! all {
    ($($e:expr),*) => {
        $(easylemur_seal::record(&$e);)*
        easylemur_seal::record(&-0.0f64);
        easylemur_seal::record(&f64::from_bits(0x7ff800000000beef));
        easylemur_seal::record(&(-0.0f32));
        easylemur_seal::flush("written");
        $(same($e);)*
        same_bits(-0.0);
        same_bits(f64::from_bits(0x7ff800000000beef));
        let z: f32 = easylemur_seal::next();
        assert_eq!(z.to_bits(), (-0.0f32).to_bits());
        easylemur_seal::done("read back");
    };
}
fn main() {
    all!(true, false, i64::MIN, isize::MAX, usize::MAX, -7i32, 255u8, u128::MAX, 'é', 0.1f64 + 0.2, f64::INFINITY,
         f64::MIN_POSITIVE, 2.5f32, String::from("a\0b c:d\né 1:x "), String::new(), vec![1isize, -2, 3], Vec::<isize>::new(),
         vec![vec![], vec![1isize], vec![]], vec![String::new(), String::from(" ")], (1isize, String::from("x y"), 2.5f64),
         Some(String::from("s")), None::<isize>, (None::<isize>, Some(3isize)), vec![(1isize, 2isize), (3, 4)],
         HashMap::from([(String::from("a"), 1isize), (String::from("b b"), -2)]), HashMap::<isize, isize>::new(),
         BTreeMap::from([(1isize, vec![1.5f64])]), HashSet::from([1isize, 3]), BTreeSet::from([String::from("z")]),
         (1u8, 2i16, 3u32, 4i64, 5usize, 6isize, 7u64, String::from("8")));
}
