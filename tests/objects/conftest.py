from tests.moto_server import moto_s3

__all__ = ["moto_s3"]
