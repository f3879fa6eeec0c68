terraform {
  backend "local" {}
}

variable "vpc_id" {
  type        = string
  description = "network.vpc_id: wavegate passes it (wavegate.toml, inputs)"
}

variable "instance_type" {
  type = string
}

variable "db_password" {
  type      = string
  sensitive = true
  default   = "example-only"
}

resource "terraform_data" "server" {
  input = {
    vpc_id        = var.vpc_id
    instance_type = var.instance_type
  }
}

# Replaced whenever the server is: its name is known only after apply.
resource "terraform_data" "endpoint" {
  input            = "app-${terraform.workspace}.example.com"
  triggers_replace = terraform_data.server.id
}

output "hostname" {
  value = terraform_data.endpoint.output
}

output "db_password" {
  value     = var.db_password
  sensitive = true
}
