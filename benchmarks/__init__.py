"""Speed and memory figures, each printed beside a reference measured in the same run (`make bench`)."""
