"""add_input for an input config.pbtxt already declares with other dims: must fail to load."""


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [2]})
        return auto_complete_model_config

    def execute(self, requests):
        return []
