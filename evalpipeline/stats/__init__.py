"""Closed-form statistics: conjugate posteriors, intervals, leaderboards."""
