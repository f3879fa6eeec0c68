#!/usr/bin/env python3
"""Writes v1-record.json: a change set stored as wavegate wrote it at
change-set version 1 (integers written exactly in every digest), computed
here independently of wavegate's own code. Python's json module with sorted
keys and no whitespace is RFC 8785 for this document (ASCII keys, integers
only), except that it writes integers exactly: the version-1 rule.

Run: python3 make_v1_record.py > v1-record.json
"""
import hashlib
import json


def digest(value):
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


member = "app@prod"
entries = [
    {
        "address": "aws_instance.big",
        "action": "update",
        # 2^53 + 1: version 1 binds it digit for digit, RFC 8785 as 2^53.
        "after": {"max": 9007199254740993, "min": -9223372036854775808, "n": 3},
    }
]
outputs = {"known": {"id": 18446744073709551615}, "unknown": []}
plan_digest = digest(
    {
        "denied": [],
        "destructive": False,
        "entries": entries,
        "member": member,
        "outputs": outputs,
    }
)
inputs = {"seed": 9007199254740995}
set_digest = digest(
    {
        "version": 1,
        "members": [
            {
                "member": member,
                "status": "planned",
                "planDigest": plan_digest,
                "unknownInputs": [],
                "inputs": inputs,
            }
        ],
    }
)
record = {
    "version": 1,
    "members": [
        {
            "member": member,
            "status": "planned",
            "planDigest": plan_digest,
            "unknownInputs": [],
            "inputs": inputs,
            "plan": {
                "member": member,
                "summary": "one update",
                "entries": entries,
                "outputs": outputs,
                "destructive": False,
                "planDigest": plan_digest,
            },
        }
    ],
    "digest": set_digest,
}
print(json.dumps(record, indent=2))
