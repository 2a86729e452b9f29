"""Model weights by reference: the verifier the hosts run (verify.py, standard library only)."""
