/* compiled into a layer that has no sources yet, so that its library still builds */
typedef int vq_empty_layer;
