"""Sealing a sweep: the bundle's layout, the sanitiser, the BagIt bag and its archive, the RO-Crate, the signature."""
