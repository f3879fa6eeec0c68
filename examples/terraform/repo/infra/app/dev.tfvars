instance_type = "t3.small"
