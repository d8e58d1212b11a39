//! What the operator's caches (its controllers' reflectors) keep of an
//! object.

use kube::Resource;

/// Drops what the controller never reads, to keep the caches small:
/// managedFields dominate the size of an applied object.
pub fn trim<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
    if let Some(annotations) = obj.meta_mut().annotations.as_mut() {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}
