//! Compile-time behaviour of `#[fuse]`: every mistake in `tests/ui/fail/` (one file per mistake, named after
//! it) must fail with the reviewed message in its `.stderr`, pointing at the offending token; everything in
//! `tests/ui/pass/` must compile and run. Regenerate messages with `TRYBUILD=overwrite` and review them.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
