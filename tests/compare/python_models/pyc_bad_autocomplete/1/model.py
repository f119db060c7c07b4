"""add_input without a data_type: the model must fail to load."""


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input({"name": "IN", "dims": [1]})
        return auto_complete_model_config

    def execute(self, requests):
        return []
