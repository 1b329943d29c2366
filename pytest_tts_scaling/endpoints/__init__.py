"""The endpoints a run measures (local, a URL, SageMaker) behind one interface."""
