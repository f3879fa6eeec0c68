//! Reports: the markdown PR comment and the JSON report.
