class RegistryFaultMixin:
    pass
