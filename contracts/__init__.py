"""Contracts several pipeline stages share (STYLE rule 0): the dead-letter envelope, the lake's
layout and read API, the lake's Arrow columns, and the advantages a learner trains on.

A floor between `streams` and `processors`: the processors write by these contracts and the
learner, analytics and the fleet read by them, without importing one another.
"""
