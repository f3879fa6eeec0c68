//! A plan file a plan command wrote: read, validated and digested, or
//! refused; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wavegate::plan::planfile::MemberPlan;

fuzz_target!(|data: &[u8]| {
    let _ = MemberPlan::parse("app@dev", data);
});
