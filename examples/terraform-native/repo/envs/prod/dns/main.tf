terraform {
  backend "local" {}
}

variable "hostname" {
  type        = string
  description = "app.hostname; known only after app applies when both change"
  default     = "pending.invalid"
}

resource "terraform_data" "record" {
  input = {
    name   = "www.prod.example.com"
    target = var.hostname
  }
}

output "fqdn" {
  value = "www.prod.example.com"
}
