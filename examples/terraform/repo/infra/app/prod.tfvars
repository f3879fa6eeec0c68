instance_type = "t3.large"
