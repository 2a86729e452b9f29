"""The deployment's secrets on the control machine: API keys, and the secrets its hosts share.
"""
