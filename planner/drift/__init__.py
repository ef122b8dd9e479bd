"""The drift report: findings, the nodes x components matrix and the pod reducer behind it."""
