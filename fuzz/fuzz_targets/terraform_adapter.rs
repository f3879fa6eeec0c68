//! `terraform show -json` and `terraform output -json` as the adapters
//! read them: turned into a plan or an outputs file, or refused; never a
//! panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wavegate::plan::terraform::{adapt_terraform, adapt_terraform_outputs};

fuzz_target!(|data: &[u8]| {
    if let Some((pick, json)) = data.split_first() {
        if pick % 2 == 0 {
            let _ = adapt_terraform(json);
        } else {
            let _ = adapt_terraform_outputs(json, pick % 4 == 1);
        }
    }
});
