"""The plumbing every layer stands on: paths, errors, files, hashing, processes, run logs.
"""
