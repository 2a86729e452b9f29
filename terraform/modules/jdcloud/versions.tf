terraform {
  # 1.9 is the first release whose variable validations may refer to other variables.
  required_version = ">= 1.9"

  required_providers {
    jdcloud = {
      # The only JD Cloud provider with a public release history: hashicorp/jdcloud, whose
      # repository was archived on 2020-12-09. 1.1.0 (2019-07-08) is its last release and
      # the first built for Terraform 0.12+ (plugin protocol 5, still loadable by 1.x).
      # Pinned exactly: the schema below was written against it. See README.md.
      source  = "hashicorp/jdcloud"
      version = "= 1.1.0"
    }
  }
}
