"""Probes: plain functions Chaos Toolkit calls, returning evidence; plus the continuous monitor."""
