"""Tests of the AWS side against a moto server."""
