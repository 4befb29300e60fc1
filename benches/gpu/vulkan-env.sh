# Sourced by run.sh and check.sh: the Vulkan loader (the machine's, or Debian's packages
# unpacked from .gl/ where it has none) and the NVIDIA driver's ICD wherever the driver
# installed it.
if ! ldconfig -p | grep -q 'libvulkan.so.1 ' && ls .gl/*.deb >/dev/null 2>&1; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
for f in /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json \
         /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json; do
  if [ -f "$f" ]; then export VK_DRIVER_FILES=$f; break; fi
done
