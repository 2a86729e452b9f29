"""Provisioning with Terraform: terraform/modules/<provider>, driven from the inventory.

cli.py          typed wrapper over `terraform -chdir=DIR ... -json`
tfvars.py       root module + tfvars rendered from the inventory
contract.py     the shared host contract (module outputs) read back into hosts
credentials.py  credential sources found before any API call
mirror.py       terraform + provider filesystem mirror in the bundle (offline)
provision.py    the steps `installer up|plan|down` run
workdir.py      where a deployment's terraform works (module, tfvars, state, tools)
"""
