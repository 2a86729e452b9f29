"""The inventory: one YAML file validated once into typed objects (the single source of truth)."""

from installer.inventory.loader import load_inventory
from installer.inventory.models import Engine, Host, Inventory, Model, Ports, SSHSettings

__all__ = ["Engine", "Host", "Inventory", "Model", "Ports", "SSHSettings", "load_inventory"]
