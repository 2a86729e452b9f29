"""Ansible: render inventory + variables from the typed inventory, run playbooks via ansible-runner."""
