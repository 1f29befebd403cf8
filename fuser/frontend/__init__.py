from .definition import FusionDefinition
