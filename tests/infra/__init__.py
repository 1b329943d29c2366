"""Tests of the CDK app (infra/) synthesized from artifacts."""
