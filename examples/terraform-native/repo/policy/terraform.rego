# Conftest-style rules over each member's plan, read from the base branch
# (wavegate.toml, [[policy.rego]]). Every message `deny` gives is one of the
# plan's denied rules: the plan applies only once someone in
# `policy.overriders` lets exactly that plan through with /override.
#
# input: {"member": "app@prod", "component": "app", "stage": "prod",
#         "plan": {"entries": [{"address", "action", "before", "after"}, ...], ...}}
package wavegate

# Nothing is deleted or replaced in prod without an override.
deny contains msg if {
	input.stage == "prod"
	some entry in input.plan.entries
	entry.action in {"delete", "replace"}
	msg := sprintf("no-prod-destroy: %s would be %sd in prod", [entry.address, entry.action])
}

# No bucket is readable by everyone.
deny contains msg if {
	some entry in input.plan.entries
	entry.action in {"create", "update", "replace"}
	entry.after.acl in {"public-read", "public-read-write"}
	msg := sprintf("no-public-buckets: %s would be %s", [entry.address, entry.after.acl])
}
