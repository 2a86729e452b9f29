"""Flows: what one command does, start to end, made of the mechanisms below (installer/day2,
status, lab and state_archive are flows too).
"""
