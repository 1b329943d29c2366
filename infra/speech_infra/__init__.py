"""The CDK app of the speech endpoints (docs/production.md#deploying) and the ``speech-infra``
command.

Stacks: :class:`~speech_infra.foundation.SpeechFoundationStack` →
:class:`~speech_infra.model_cache.SpeechModelCacheStack` →
:class:`~speech_infra.endpoint.SpeechEndpointStack` per model in
:data:`~speech_infra.registry.REGISTRY`. Autoscaling is gated on the model's plan artifact
(:mod:`speech_infra.plan_gate`).
"""
