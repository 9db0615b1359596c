"""Tests of the deployment files: the compose file against the Compose specification."""
