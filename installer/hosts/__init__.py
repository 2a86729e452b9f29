"""Reaching the hosts outside Ansible: the one SSH argv builder, the parallel remote runner, key
pairs, and the proof that each gateway answers.
"""
