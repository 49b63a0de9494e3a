"""Faults: plain functions that Chaos Toolkit calls as actions, one module per family.

Each takes JSON-friendly keyword arguments (the signature is the contract Chaos Toolkit checks),
writes its ledger entry before it acts (:meth:`raychaos.runtime.Run.fault`), returns evidence
that it landed, and is undone by :func:`raychaos.faults.rollback.undo_all`.
"""
