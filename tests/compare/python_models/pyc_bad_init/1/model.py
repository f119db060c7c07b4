"""initialize raises: the model must fail to load with this text."""


class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("initialize refused to start")

    def execute(self, requests):
        return []
